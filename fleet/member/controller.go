package member

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"

	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/messages"
)

// controllersActorName is the name of every member's controller actor.
const controllersActorName = "plugvisor-controller"

// ControllerHandler runs a controller operation another member sent, on
// this node's controller, and answers it. It is called on a goroutine of
// its own; ctx ends when the member stops.
type ControllerHandler func(ctx context.Context, req *messages.FleetControllerRequest) *messages.FleetControllerResponse

// ErrNoControllers is a member's answer to a controller operation while it
// serves none (before its agent's controller started): the operation was
// not run. Send it to another node, or again.
var ErrNoControllers = errclass.New(errclass.Unavailable, "this member runs no controller operations")

// ErrMemberGone: the member a controller operation was sent to left the
// cluster, or did not answer in time: the operation may or may not have
// run. Every controller operation is safe to send again.
var ErrMemberGone = errclass.New(errclass.Unavailable, "the member did not answer")

// controllers is a member's service of other members' controller
// operations: the handler its agent gave, and the operations running. The
// handler is set once the agent's controller runs; the controller actor
// of each incarnation reads it.
type controllers struct {
	handler atomic.Pointer[ControllerHandler]
	running sync.WaitGroup
}

// ServeControllers makes the member run the controller operations other
// members send it with h. Until it is called, they are answered
// ErrNoControllers.
func (m *Member) ServeControllers(h ControllerHandler) { m.controllers.handler.Store(&h) }

// controllersActor receives other members' controller operations: it
// checks each request's signature, and runs it on a goroutine, whose
// answer goes straight to the request's sender. It keeps no state.
type controllersActor struct {
	member *Member
}

// Receive dispatches the controller actor's messages.
func (a *controllersActor) Receive(ctx actor.Context) {
	if req, ok := ctx.Message().(*messages.FleetControllerRequest); ok && ctx.Sender() != nil {
		a.onRequest(ctx, req)
	}
}

// onRequest answers req: refused unsigned, ErrNoControllers without a
// handler, else with what the handler answers, on a goroutine.
func (a *controllersActor) onRequest(ctx actor.Context, req *messages.FleetControllerRequest) {
	m, sender := a.member, ctx.Sender()
	if err := checkSignature(m.cfg.Fleet.Keyring, req); err != nil {
		ctx.Respond(&messages.FleetControllerResponse{Error: messages.ErrorToProto(err), Node: m.cfg.Fleet.NodeID})
		return
	}
	h := m.controllers.handler.Load()
	if h == nil {
		ctx.Respond(&messages.FleetControllerResponse{Node: m.cfg.Fleet.NodeID, Error: messages.ErrorToProto(
			fmt.Errorf("%w: node %s runs no controller yet", ErrNoControllers, m.cfg.Fleet.NodeID))})
		return
	}
	root := ctx.ActorSystem().Root
	m.controllers.running.Add(1)
	go func() {
		defer m.controllers.running.Done()
		resp := (*h)(m.quit, req)
		resp.Node = m.cfg.Fleet.NodeID
		root.Send(sender, resp)
	}()
}

// spawnControllers starts inc's controller actor.
func (m *Member) spawnControllers(inc *incarnation) error {
	props := actor.PropsFromProducer(func() actor.Actor { return &controllersActor{member: m} })
	_, err := inc.system.Root.SpawnNamed(props, controllersActorName)
	return err
}

// RequestController sends a controller operation to the member listening
// at address, signed with the fleet's keyring, and waits for its answer
// until ctx ends or timeout passes, or that member leaves the cluster
// (ErrMemberGone: the operation may or may not have run). The answer, an
// error included, is returned as the other member's controller gave it.
// The answer comes to a reply actor of this request's own, not to a
// future: protoactor's futures race when they time out with an answer on
// its way.
func (m *Member) RequestController(ctx context.Context, address string, req *messages.FleetControllerRequest, timeout time.Duration) (*messages.FleetControllerResponse, error) {
	inc := m.current.Load()
	if inc == nil {
		return nil, errJoining
	}
	req.Node, req.RequestId = m.cfg.Fleet.NodeID, newRequestID()
	if err := sign(m.cfg.Fleet.Keyring, req); err != nil {
		return nil, fmt.Errorf("sign the controller operation %s: %w", req.GetOperation(), err)
	}
	answer := make(chan *messages.FleetControllerResponse, 1)
	reply := inc.system.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if resp, ok := c.Message().(*messages.FleetControllerResponse); ok {
			select {
			case answer <- resp:
			default:
			}
		}
	}))
	defer inc.system.Root.Stop(reply)
	inc.system.Root.RequestWithCustomSender(actor.NewPID(address, controllersActorName), req, reply)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		changed := m.topologyChanged()
		if !m.hasMemberAt(address) {
			return nil, fmt.Errorf("%w: the member at %s left the cluster while controller operation %s was out", ErrMemberGone, address, req.GetOperation())
		}
		select {
		case resp := <-answer:
			return resp, nil
		case <-changed:
		case <-timer.C:
			return nil, fmt.Errorf("%w: the member at %s did not answer controller operation %s within %v", ErrMemberGone, address, req.GetOperation(), timeout)
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: controller operation %s at %s: %w", ErrMemberGone, req.GetOperation(), address, ctx.Err())
		}
	}
}

// hasMemberAt reports whether a member of the topology listens at address.
func (m *Member) hasMemberAt(address string) bool {
	return slices.ContainsFunc(*m.topology.Load(), func(mem *cluster.Member) bool { return mem.Address() == address })
}
