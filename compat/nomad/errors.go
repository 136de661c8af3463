package nomad

import (
	"fmt"

	"github.com/plugvisor/plugvisor/errclass"
)

// Sentinel errors, checked with errors.Is. Where Nomad's registry refuses
// something, the adapter's error has Nomad's exact text and matches one of
// these; the other refusals are plugvisor's (limits, shutdown, the store)
// and match the registry package's sentinels.
var (
	// ErrInvalid: Nomad's registry refuses the arguments (an empty type or
	// name, no connection info), or they are beyond plugvisor's limits.
	ErrInvalid = errclass.New(errclass.Invalid, "invalid plugin arguments")
	// ErrNoPluginsForType: no plugin of the type was ever registered.
	ErrNoPluginsForType = errclass.New(errclass.NotFound, "no plugins registered for type")
	// ErrPluginNotFound: no current allocation of the plugin.
	ErrPluginNotFound = errclass.New(errclass.NotFound, "plugin not found")
	// ErrAllocNotFound: the plugin has no such allocation.
	ErrAllocNotFound = errclass.New(errclass.NotFound, "no plugin for that allocation")
	// ErrNoDispenser: no dispenser was given for the type.
	ErrNoDispenser = errclass.New(errclass.NotFound, "no plugin dispenser found")
)

// refuse returns an error that reads as Nomad's error and matches
// sentinel, whose class it has.
func refuse(sentinel error, format string, args ...any) error {
	return errclass.Also(fmt.Errorf(format, args...), sentinel)
}
