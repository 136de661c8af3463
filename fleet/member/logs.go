package member

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plugvisor/plugvisor/actors"
)

// lostConnection is the message protoactor's remote logs, at error level,
// when a stream to another member ends with anything but io.EOF itself.
const lostConnection = "EndpointWriter lost connection"

// peerTrouble are the messages protoactor logs, at error level, when it
// cannot reach another member or loses it: the connection's records, and
// a grain request that failed on its way (a timeout or a dead letter while
// the grain's member is gone), which protoactor retries and the Router
// answers for.
var peerTrouble = map[string]bool{
	lostConnection:                                      true,
	"EndpointWriter failed to connect":                  true,
	"EndpointWriter failed to create receive stream":    true,
	"EndpointWriter failed to send connect request":     true,
	"EndpointWriter failed to receive connect response": true,
	"cluster.RequestFuture failed":                      true,
}

// gossipFailed is the message protoactor's gossip logs, at warning level,
// each time a gossip exchange with another member fails: every second
// (the member's GossipInterval) for each member that is in the topology
// but does not answer, as a killed member does until its lease runs out
// (at most Fleet.LeaseTTL; one that stops revokes its lease and leaves at
// once). Nothing of ours reads the gossip: membership is etcd's, and the
// failed dials to that member are warned about already ("EndpointWriter
// failed to connect", peerTrouble, a warning while it holds its lease).
// Removing the member sooner is no cure: one only this member cannot
// reach may be alive, and protoactor blocks a member that leaves the
// topology for good.
const gossipFailed = "sendGossipForMember failed"

// peerLoss is a slog handler that lowers protoactor's records of a
// connection to another member (peerTrouble): to debug when the member
// left the fleet (left says so from etcd: a member that stops revokes its
// lease before its remote stops, so another member may still dial it in
// the instant before it sees it leave), or when the connection ended as
// a clean stop ends it (this member closed it, gRPC's Canceled, or the
// other member's server did, EOF); to a warning otherwise. The fleet
// learns that a member is gone from its lease in etcd, which it logs
// itself, so protoactor's line is never this member's error. A failed
// gossip exchange (gossipFailed), and no other gossip record, is lowered
// to debug always.
type peerLoss struct {
	slog.Handler
	left func(address string) bool
}

// Handle implements slog.Handler.
func (h peerLoss) Handle(ctx context.Context, r slog.Record) error {
	if !peerTrouble[r.Message] && r.Message != gossipFailed || r.Level < slog.LevelWarn {
		return h.Handler.Handle(ctx, r)
	}
	level := slog.LevelWarn
	if r.Message == gossipFailed {
		level = slog.LevelDebug
	}
	r.Attrs(func(a slog.Attr) bool {
		switch err, _ := a.Value.Any().(error); {
		case a.Key == "error" && r.Message == lostConnection && closedCleanly(err),
			a.Key == "address" && h.left != nil && h.left(a.Value.String()):
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
	return peerLoss{h.Handler.WithAttrs(attrs), h.left}
}

// WithGroup implements slog.Handler.
func (h peerLoss) WithGroup(name string) slog.Handler {
	return peerLoss{h.Handler.WithGroup(name), h.left}
}

// closedCleanly says whether a stream's error is that of a connection
// closed on purpose, by either side.
func closedCleanly(err error) bool {
	if err == nil {
		return false
	}
	st, ok := status.FromError(err)
	return errors.Is(err, io.EOF) || ok && (st.Code() == codes.Canceled || strings.HasSuffix(st.Message(), io.EOF.Error()))
}

// quietLogger gives protoactor a logger that writes warnings and errors
// only, through l, and nothing once the system stops (stopping); trouble
// with the connection to another member is no error, and none at all when
// the member left (left) or the connection closed as a clean stop closes
// it (peerLoss).
func quietLogger(l hclog.Logger, left func(address string) bool, stopping *atomic.Bool) func(*actor.ActorSystem) *slog.Logger {
	return func(system *actor.ActorSystem) *slog.Logger {
		h := minLevel{actors.NewSlogHandler(l.Named("protoactor")), slog.LevelWarn}
		return slog.New(peerLoss{untilStopped{h, stopping}, left}).With("system", system.ID)
	}
}

// untilStopped is a slog handler that drops every record once stopping is
// set.
type untilStopped struct {
	slog.Handler
	stopping *atomic.Bool
}

func (h untilStopped) Enabled(ctx context.Context, l slog.Level) bool {
	return !h.stopping.Load() && h.Handler.Enabled(ctx, l)
}

func (h untilStopped) Handle(ctx context.Context, r slog.Record) error {
	if h.stopping.Load() {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h untilStopped) WithAttrs(attrs []slog.Attr) slog.Handler {
	return untilStopped{h.Handler.WithAttrs(attrs), h.stopping}
}

func (h untilStopped) WithGroup(name string) slog.Handler {
	return untilStopped{h.Handler.WithGroup(name), h.stopping}
}

// minLevel is a slog handler that drops records below a level.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(attrs []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(attrs), h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h.Handler.WithGroup(name), h.min}
}
