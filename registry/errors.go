package registry

import (
	"errors"
	"fmt"

	"github.com/plugvisor/plugvisor/messages"
)

// Sentinel errors of the registry, checked with errors.Is.
var (
	// ErrInvalid: the request was malformed; nothing changed.
	ErrInvalid = errors.New("registry: invalid argument")
	// ErrNotFound: no such plugin or allocation; nothing changed.
	ErrNotFound = errors.New("registry: not found")
	// ErrShutdown: the registry is shut down; nothing changed.
	ErrShutdown = errors.New("registry: shut down")
	// ErrStore: the durable store failed; the change was not made.
	ErrStore = errors.New("registry: durable store failed")
	// ErrNoDispenser: no dispenser was configured for the plugin type.
	ErrNoDispenser = errors.New("registry: no dispenser for plugin type")
	// ErrLimit: a limit of Limits was reached; nothing changed.
	ErrLimit = errors.New("registry: limit reached")
)

// codedError carries a registry error across the actor boundary and back:
// its text is the full message, and errors.Is matches its sentinel.
type codedError struct {
	sentinel error
	text     string
}

func (e *codedError) Error() string { return e.text }
func (e *codedError) Unwrap() error { return e.sentinel }

func errorf(sentinel error, format string, args ...any) error {
	return &codedError{sentinel: sentinel, text: sentinel.Error() + ": " + fmt.Sprintf(format, args...)}
}

var codes = []struct {
	code     messages.ErrorCode
	sentinel error
}{
	{messages.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, ErrInvalid},
	{messages.ErrorCode_ERROR_CODE_NOT_FOUND, ErrNotFound},
	{messages.ErrorCode_ERROR_CODE_SHUT_DOWN, ErrShutdown},
	{messages.ErrorCode_ERROR_CODE_STORE, ErrStore},
}

// toProto turns an error into the Error of a response; nil stays nil.
func toProto(err error) *messages.Error {
	if err == nil {
		return nil
	}
	for _, c := range codes {
		if errors.Is(err, c.sentinel) {
			return &messages.Error{Code: c.code, Message: err.Error()}
		}
	}
	return &messages.Error{Code: messages.ErrorCode_ERROR_CODE_UNSPECIFIED, Message: err.Error()}
}

// FromProto turns the Error of a registry response back into a Go error
// that errors.Is matches against the registry's sentinels; nil stays nil.
func FromProto(e *messages.Error) error {
	if e == nil {
		return nil
	}
	for _, c := range codes {
		if c.code == e.GetCode() {
			return &codedError{sentinel: c.sentinel, text: e.GetMessage()}
		}
	}
	return errors.New(e.GetMessage())
}
