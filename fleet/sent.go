package fleet

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc/stats"
)

// A write to etcd that fails may or may not have been applied: that
// depends on whether it left this process. sentKey marks a call's
// context (withSentMark), and the etcd client's stats handler (sentMarker)
// sets the mark once gRPC has given the call a transport and queued its
// headers on it. A call that never had one (etcd down, every dial
// refused) was not sent, and its error says "not applied".
type sentKey struct{}

// withSentMark returns ctx marked, and the flag set once a call made with
// it is sent.
func withSentMark(ctx context.Context) (context.Context, *atomic.Bool) {
	sent := &atomic.Bool{}
	return context.WithValue(ctx, sentKey{}, sent), sent
}

// sending marks ctx for a write (withSentMark) and returns the function
// that turns the write's error from the etcd client into writeErr's: a
// write that was sent and not answered is outcome unknown (Store.call),
// never "unavailable".
func sending(ctx context.Context) (context.Context, func(error) error) {
	ctx, sent := withSentMark(ctx)
	return ctx, func(err error) error { return writeErr(err, sent.Load()) }
}

// sentMarker is the stats handler of every etcd client of the fleet
// (Config.ClientConfig).
type sentMarker struct{}

// HandleRPC sets the call's mark at its first outgoing header.
func (sentMarker) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.OutHeader); !ok {
		return
	}
	if sent, ok := ctx.Value(sentKey{}).(*atomic.Bool); ok {
		sent.Store(true)
	}
}

// TagRPC implements stats.Handler.
func (sentMarker) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

// TagConn implements stats.Handler.
func (sentMarker) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

// HandleConn implements stats.Handler.
func (sentMarker) HandleConn(context.Context, stats.ConnStats) {}
