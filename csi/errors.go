package csi

import (
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/names"
)

// Sentinel errors for the gRPC status codes a plugin answers with. Every RPC
// error of a [Client] wraps exactly one of them; ErrUnknown stands for
// codes.Unknown and for any code gRPC may add later.
var (
	ErrCanceled           = errclass.New(errclass.Unavailable, "canceled")
	ErrUnknown            = errclass.New(errclass.Upstream, "unknown error")
	ErrInvalidArgument    = errclass.New(errclass.Invalid, "invalid argument")
	ErrDeadlineExceeded   = errclass.New(errclass.Deadline, "deadline exceeded")
	ErrNotFound           = errclass.New(errclass.NotFound, "not found")
	ErrAlreadyExists      = errclass.New(errclass.Conflict, "already exists")
	ErrPermissionDenied   = errclass.New(errclass.Denied, "permission denied")
	ErrResourceExhausted  = errclass.New(errclass.Exhausted, "resource exhausted")
	ErrFailedPrecondition = errclass.New(errclass.Conflict, "failed precondition")
	ErrAborted            = errclass.New(errclass.Conflict, "aborted")
	ErrOutOfRange         = errclass.New(errclass.Invalid, "out of range")
	ErrUnimplemented      = errclass.New(errclass.Unsupported, "unimplemented")
	ErrInternal           = errclass.New(errclass.Upstream, "internal error")
	ErrUnavailable        = errclass.New(errclass.Unavailable, "unavailable")
	ErrDataLoss           = errclass.New(errclass.Upstream, "data loss")
	ErrUnauthenticated    = errclass.New(errclass.Denied, "unauthenticated")
)

// Sentinel errors of the client itself.
var (
	// ErrInvalidResponse is returned when a plugin answers an RPC with a
	// response the CSI spec forbids, such as GetPluginInfo without a name.
	ErrInvalidResponse = errclass.New(errclass.Upstream, "invalid response")
	// ErrSocketPathNotAbsolute is returned for an empty or relative socket path.
	ErrSocketPathNotAbsolute = errclass.New(errclass.Invalid, "socket path is not absolute")
	// ErrSocketPathTooLong is returned for a socket path longer than
	// [MaxSocketPathLen] bytes, which does not fit in sun_path.
	ErrSocketPathTooLong = errclass.New(errclass.Invalid, "socket path too long")
	// ErrInvalidOptions is returned by [Dial] for negative or inconsistent [Options].
	ErrInvalidOptions = errclass.New(errclass.Invalid, "invalid options")
	// ErrConnect is returned by [Dial] when the connection did not become
	// ready before the caller's context ended; the error also wraps the
	// context's error.
	ErrConnect = errclass.New(errclass.Unavailable, "cannot connect")
	// ErrClosed is returned by RPCs on a [Client] after Close.
	ErrClosed = errclass.New(errclass.Unavailable, "client is closed")
)

// codeErrors maps each gRPC status code a plugin can answer with to its sentinel.
var codeErrors = map[codes.Code]error{
	codes.Canceled:           ErrCanceled,
	codes.Unknown:            ErrUnknown,
	codes.InvalidArgument:    ErrInvalidArgument,
	codes.DeadlineExceeded:   ErrDeadlineExceeded,
	codes.NotFound:           ErrNotFound,
	codes.AlreadyExists:      ErrAlreadyExists,
	codes.PermissionDenied:   ErrPermissionDenied,
	codes.ResourceExhausted:  ErrResourceExhausted,
	codes.FailedPrecondition: ErrFailedPrecondition,
	codes.Aborted:            ErrAborted,
	codes.OutOfRange:         ErrOutOfRange,
	codes.Unimplemented:      ErrUnimplemented,
	codes.Internal:           ErrInternal,
	codes.Unavailable:        ErrUnavailable,
	codes.DataLoss:           ErrDataLoss,
	codes.Unauthenticated:    ErrUnauthenticated,
}

// rpcError turns the error of the RPC named rpc into a package-prefixed
// error wrapping the sentinel of its status code and keeping the plugin's
// message, made safe by names.Text: at most names.MaxTextLen bytes of
// UTF-8, without control or bidirectional characters, before it reaches
// the API's answers, events, records and logs.
func rpcError(rpc string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%s: %w", rpc, err)
	}
	sentinel, known := codeErrors[st.Code()]
	if !known {
		sentinel = ErrUnknown
	}
	switch {
	case st.Message() == "":
		return fmt.Errorf("%s: %w", rpc, sentinel)
	case st.Code() == codes.Unavailable && transportFailed(st.Message()):
		return fmt.Errorf("%s: %w: the plugin does not answer at its socket: it stopped, or is starting again (%s)",
			rpc, sentinel, names.Text(st.Message()))
	}
	return fmt.Errorf("%s: %w: %s", rpc, sentinel, names.Text(st.Message()))
}

// transportFailed reports whether msg, an Unavailable status's message,
// is gRPC's own for a call whose transport failed (the dial refused, the
// socket gone, the connection closed under the call), as against a
// plugin's answer.
func transportFailed(msg string) bool {
	return strings.HasPrefix(msg, "connection error:") || strings.HasPrefix(msg, "error reading from server:")
}

// invalidResponse reports a plugin answer the CSI spec forbids.
func invalidResponse(rpc, format string, args ...any) error {
	return fmt.Errorf("%s: %w: %s", rpc, ErrInvalidResponse, names.Text(fmt.Sprintf(format, args...)))
}
