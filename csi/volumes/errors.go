package volumes

import (
	"errors"
	"strings"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/messages"
)

// Sentinel errors of the volume manager. They survive the trip through
// MountVolumeResponse and UnmountVolumeResponse: the [Mounter] gives them
// back to errors.Is. Failures of the plugin's RPCs and of the file system
// come back as plain errors carrying the full message.
var (
	// ErrPluginNotFound is returned when no csi-node plugin of the name is
	// registered. Nothing changed.
	ErrPluginNotFound = errors.New("node plugin not found")
	// ErrNotMounted is returned by an unmount for an alloc that does not
	// mount the volume. Nothing changed.
	ErrNotMounted = errors.New("volume not mounted")
	// ErrVolumesShutDown is returned once the volume manager is shut down.
	ErrVolumesShutDown = errors.New("volume manager is shut down")
)

// volumeErrorCodes maps the sentinels to the codes of messages.Error. Two share
// ERROR_CODE_NOT_FOUND; their messages start with "csi: " and the sentinel,
// which tells them apart.
var volumeErrorCodes = []struct {
	code     messages.ErrorCode
	sentinel error
}{
	{messages.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, csi.ErrInvalidVolumeRequest},
	{messages.ErrorCode_ERROR_CODE_NOT_FOUND, ErrPluginNotFound},
	{messages.ErrorCode_ERROR_CODE_NOT_FOUND, ErrNotMounted},
	{messages.ErrorCode_ERROR_CODE_CONFLICT, csi.ErrClaimRefused},
	{messages.ErrorCode_ERROR_CODE_SHUT_DOWN, ErrVolumesShutDown},
}

// volumeErrorToProto turns an error into the Error of a response; nil stays nil.
func volumeErrorToProto(err error) *messages.Error {
	if err == nil {
		return nil
	}
	for _, c := range volumeErrorCodes {
		if errors.Is(err, c.sentinel) {
			return &messages.Error{Code: c.code, Message: err.Error()}
		}
	}
	return &messages.Error{Code: messages.ErrorCode_ERROR_CODE_UNSPECIFIED, Message: err.Error()}
}

// VolumeErrorFromProto turns the Error of a MountVolumeResponse,
// UnmountVolumeResponse or ShutdownVolumesResponse back into an error that
// errors.Is matches against the volume manager's sentinels; nil stays nil.
func VolumeErrorFromProto(e *messages.Error) error {
	if e == nil {
		return nil
	}
	var match error
	for _, c := range volumeErrorCodes {
		if c.code != e.GetCode() {
			continue
		}
		if match == nil || strings.HasPrefix(e.GetMessage(), "csi: "+c.sentinel.Error()) {
			match = c.sentinel
		}
	}
	if match == nil {
		return errors.New(e.GetMessage())
	}
	return &volumeError{sentinel: match, text: e.GetMessage()}
}

// volumeError is an error that came back from the volume manager actor:
// its text is the actor's, and errors.Is matches its sentinel.
type volumeError struct {
	sentinel error
	text     string
}

func (e *volumeError) Error() string { return e.text }
func (e *volumeError) Unwrap() error { return e.sentinel }
