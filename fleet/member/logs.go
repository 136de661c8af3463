package member

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// lostConnection is the message protoactor's remote logs, at error level,
// when a stream to another member ends with anything but io.EOF itself.
const lostConnection = "EndpointWriter lost connection"

// peerLoss is a slog handler that lowers protoactor's lostConnection
// record to debug when the connection ended as a clean stop ends it: this
// member closed it (gRPC's Canceled, as when the other member left the
// topology or this one stops), or the other member's server closed it
// (EOF). Any other loss is a warning: the fleet learns that a member is
// gone from its lease in etcd, which it logs itself, so protoactor's line
// is never this member's error.
type peerLoss struct{ slog.Handler }

// Handle implements slog.Handler.
func (h peerLoss) Handle(ctx context.Context, r slog.Record) error {
	if r.Message != lostConnection || r.Level < slog.LevelWarn {
		return h.Handler.Handle(ctx, r)
	}
	level := slog.LevelWarn
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok && a.Key == "error" && closedCleanly(err) {
			level = slog.LevelDebug
		}
		return true
	})
	if !h.Enabled(ctx, level) {
		return nil
	}
	lowered := slog.NewRecord(r.Time, level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool { lowered.AddAttrs(a); return true })
	return h.Handler.Handle(ctx, lowered)
}

// WithAttrs implements slog.Handler.
func (h peerLoss) WithAttrs(attrs []slog.Attr) slog.Handler {
	return peerLoss{h.Handler.WithAttrs(attrs)}
}

// WithGroup implements slog.Handler.
func (h peerLoss) WithGroup(name string) slog.Handler { return peerLoss{h.Handler.WithGroup(name)} }

// closedCleanly says whether a stream's error is that of a connection
// closed on purpose, by either side.
func closedCleanly(err error) bool {
	st, ok := status.FromError(err)
	return errors.Is(err, io.EOF) || ok && (st.Code() == codes.Canceled || strings.HasSuffix(st.Message(), io.EOF.Error()))
}
