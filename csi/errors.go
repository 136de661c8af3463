package csi

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinel errors for the gRPC status codes a plugin answers with. Every RPC
// error of a [Client] wraps exactly one of them; ErrUnknown stands for
// codes.Unknown and for any code gRPC may add later.
var (
	ErrCanceled           = errors.New("canceled")
	ErrUnknown            = errors.New("unknown error")
	ErrInvalidArgument    = errors.New("invalid argument")
	ErrDeadlineExceeded   = errors.New("deadline exceeded")
	ErrNotFound           = errors.New("not found")
	ErrAlreadyExists      = errors.New("already exists")
	ErrPermissionDenied   = errors.New("permission denied")
	ErrResourceExhausted  = errors.New("resource exhausted")
	ErrFailedPrecondition = errors.New("failed precondition")
	ErrAborted            = errors.New("aborted")
	ErrOutOfRange         = errors.New("out of range")
	ErrUnimplemented      = errors.New("unimplemented")
	ErrInternal           = errors.New("internal error")
	ErrUnavailable        = errors.New("unavailable")
	ErrDataLoss           = errors.New("data loss")
	ErrUnauthenticated    = errors.New("unauthenticated")
)

// Sentinel errors of the client itself.
var (
	// ErrInvalidResponse is returned when a plugin answers an RPC with a
	// response the CSI spec forbids, such as GetPluginInfo without a name.
	ErrInvalidResponse = errors.New("invalid response")
	// ErrSocketPathNotAbsolute is returned for an empty or relative socket path.
	ErrSocketPathNotAbsolute = errors.New("socket path is not absolute")
	// ErrSocketPathTooLong is returned for a socket path longer than
	// [MaxSocketPathLen] bytes, which does not fit in sun_path.
	ErrSocketPathTooLong = errors.New("socket path too long")
	// ErrInvalidOptions is returned by [Dial] for negative or inconsistent [Options].
	ErrInvalidOptions = errors.New("invalid options")
	// ErrConnect is returned by [Dial] when the connection did not become
	// ready before the caller's context ended; the error also wraps the
	// context's error.
	ErrConnect = errors.New("cannot connect")
	// ErrClosed is returned by RPCs on a [Client] after Close.
	ErrClosed = errors.New("client is closed")
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
// message.
func rpcError(rpc string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("csi: %s: %w", rpc, err)
	}
	sentinel, known := codeErrors[st.Code()]
	if !known {
		sentinel = ErrUnknown
	}
	if st.Message() == "" {
		return fmt.Errorf("csi: %s: %w", rpc, sentinel)
	}
	return fmt.Errorf("csi: %s: %w: %s", rpc, sentinel, st.Message())
}

// invalidResponse reports a plugin answer the CSI spec forbids.
func invalidResponse(rpc, format string, args ...any) error {
	return fmt.Errorf("csi: %s: %w: %s", rpc, ErrInvalidResponse, fmt.Sprintf(format, args...))
}
