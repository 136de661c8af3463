package registry

import (
	"fmt"

	"github.com/plugvisor/plugvisor/errclass"
)

// Sentinel errors of the registry, checked with errors.Is; each matches its
// class of errclass too.
var (
	// ErrInvalid: the request was malformed; nothing changed.
	ErrInvalid = errclass.New(errclass.Invalid, "invalid argument")
	// ErrNotFound: no such plugin or allocation; nothing changed.
	ErrNotFound = errclass.New(errclass.NotFound, "not found")
	// ErrShutdown: the registry is shut down; nothing changed.
	ErrShutdown = errclass.New(errclass.ShutDown, "registry shut down")
	// ErrStore: the durable store failed; the change was not made.
	ErrStore = errclass.New(errclass.Store, "durable store failed")
	// ErrNoDispenser: no dispenser was configured for the plugin type.
	ErrNoDispenser = errclass.New(errclass.NotFound, "no dispenser for plugin type")
	// ErrLimit: a limit of Limits was reached; nothing changed.
	ErrLimit = errclass.New(errclass.Limit, "limit reached")
	// ErrTimeout: the registry actor did not answer within
	// Config.RequestTimeout. A write may or may not be durable.
	ErrTimeout = errclass.New(errclass.Deadline, "request timed out")
)

// errorf returns an error that reads "<sentinel>: <detail>" and matches
// sentinel, and everything an error among args matches when the format
// wraps it with %w.
func errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{sentinel}, args...)...)
}
