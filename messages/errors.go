package messages

import "github.com/plugvisor/plugvisor/errclass"

// classCodes is the one mapping of the error classes to the wire.
var classCodes = map[*errclass.Class]ErrorCode{
	errclass.Invalid:     ErrorCode_ERROR_CODE_INVALID_ARGUMENT,
	errclass.Denied:      ErrorCode_ERROR_CODE_DENIED,
	errclass.NotFound:    ErrorCode_ERROR_CODE_NOT_FOUND,
	errclass.Conflict:    ErrorCode_ERROR_CODE_CONFLICT,
	errclass.Limit:       ErrorCode_ERROR_CODE_LIMIT,
	errclass.Exhausted:   ErrorCode_ERROR_CODE_EXHAUSTED,
	errclass.Unsupported: ErrorCode_ERROR_CODE_UNSUPPORTED,
	errclass.Upstream:    ErrorCode_ERROR_CODE_UPSTREAM,
	errclass.Unavailable: ErrorCode_ERROR_CODE_UNAVAILABLE,
	errclass.ShutDown:    ErrorCode_ERROR_CODE_SHUT_DOWN,
	errclass.Deadline:    ErrorCode_ERROR_CODE_DEADLINE,
	errclass.Store:       ErrorCode_ERROR_CODE_STORE,
	errclass.Corrupt:     ErrorCode_ERROR_CODE_CORRUPT,
}

// ErrorToProto turns err into the Error of an answer: its class, its text
// and the IDs of its sentinels; nil stays nil. ErrorFromProto undoes it.
func ErrorToProto(err error) *Error {
	if err == nil {
		return nil
	}
	return &Error{Code: classCodes[errclass.Of(err)], Message: err.Error(), Sentinels: errclass.IDs(err)}
}

// ErrorFromProto turns the Error of an answer back into an error with the
// same text that errors.Is matches against its class and each of its
// sentinels; nil stays nil.
func ErrorFromProto(e *Error) error {
	if e == nil {
		return nil
	}
	var class *errclass.Class
	for c, code := range classCodes {
		if code == e.GetCode() && code != ErrorCode_ERROR_CODE_UNSPECIFIED {
			class = c
		}
	}
	return errclass.Rebuild(e.GetMessage(), class, e.GetSentinels())
}
