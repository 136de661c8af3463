package member

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/messages"
)

// TestTheControllerActorRunsOnlySignedRequestsOnItsHandler: with the
// fleet's keyring, a controller operation unsigned, signed with another
// keyring or changed after signing is refused as not signed and never
// reaches the handler; a signed one runs on it and is answered with the
// node's ID; a member whose agent serves no controller answers
// ErrNoControllers.
func TestTheControllerActorRunsOnlySignedRequestsOnItsHandler(t *testing.T) {
	keyring := keyringFile(t)
	system := probe.NewSystem(t)
	m := &Member{cfg: Config{Fleet: fleet.Config{NodeID: "n1", Keyring: keyring}}, quit: context.Background()}
	pid := system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &controllersActor{member: m} }))
	ask := func(req *messages.FleetControllerRequest) *messages.FleetControllerResponse {
		res, err := system.Root.RequestFuture(pid, req, grainTimeout).Result()
		require.NoError(t, err)
		return res.(*messages.FleetControllerResponse)
	}
	signed := func(k *fleet.Keyring) *messages.FleetControllerRequest {
		req := &messages.FleetControllerRequest{Operation: "create", Request: []byte(`{}`)}
		require.NoError(t, sign(k, req))
		return req
	}

	require.ErrorIs(t, messages.ErrorFromProto(ask(signed(keyring)).GetError()), ErrNoControllers)
	var ran atomic.Int32
	m.ServeControllers(func(_ context.Context, req *messages.FleetControllerRequest) *messages.FleetControllerResponse {
		ran.Add(1)
		return &messages.FleetControllerResponse{Result: []byte(req.GetOperation())}
	})
	tampered := signed(keyring)
	tampered.Request = []byte(`{"id":"someone-else's"}`)
	for _, req := range []*messages.FleetControllerRequest{{Operation: "create"}, signed(keyringFile(t)), tampered} {
		require.ErrorIs(t, messages.ErrorFromProto(ask(req).GetError()), ErrUnsigned)
	}
	require.Zero(t, ran.Load(), "no refused request reached the handler")
	resp := ask(signed(keyring))
	require.NoError(t, messages.ErrorFromProto(resp.GetError()))
	require.Equal(t, "create", string(resp.GetResult()))
	require.Equal(t, "n1", resp.GetNode())
	require.Equal(t, int32(1), ran.Load())
}
