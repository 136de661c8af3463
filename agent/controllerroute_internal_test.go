package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/controller"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/member"
	"github.com/plugvisor/plugvisor/messages"
)

// TestAControllerOperationANodeLeftUnansweredGoesToNoOtherNode routes
// each controller operation from a node without a controller to nodes a
// and b, in that order; a does not answer in time. An operation that
// changes something may have run on a, and may still: it is answered
// outcome unknown and not sent to b, where before it ran on b too (a
// volume created twice, by two controller instances at once) or, with no
// b, was answered "no controller" as if nothing had run. A listing and a
// capacity go on to b.
func TestAControllerOperationANodeLeftUnansweredGoesToNoOtherNode(t *testing.T) {
	sent := map[string]int{}
	c := &routedController{
		nodes: func(context.Context, string) ([]fleet.ControllerNode, error) {
			return []fleet.ControllerNode{{Node: "a", Address: "a:1"}, {Node: "b", Address: "b:1"}, {Node: "self", Address: "self:1"}}, nil
		},
		send: func(_ context.Context, address string, req *messages.FleetControllerRequest, timeout time.Duration) (*messages.FleetControllerResponse, error) {
			sent[address]++
			if address == "a:1" {
				return nil, fmt.Errorf("%w: the member at a:1 did not answer controller operation %s within %v", member.ErrMemberGone, req.GetOperation(), timeout)
			}
			return &messages.FleetControllerResponse{Node: "b"}, nil
		},
		nodeID: "self", timeout: time.Second, log: hclog.NewNullLogger(),
	}
	local := fmt.Errorf("%w: no csi-controller plugin hp on this node", controller.ErrNoController)
	for _, op := range []string{opCreate, opDelete, opExpand, opModify, opCreateSnapshot, opDeleteSnapshot} {
		clear(sent)
		_, err := c.route(t.Context(), "hp", op, struct{}{}, local)
		require.ErrorIs(t, err, model.ErrOutcomeUnknown, op)
		require.NotErrorIs(t, err, controller.ErrNoController, "%s: not answered as if nothing ran", op)
		require.ErrorContains(t, err, "went to node a, which did not answer")
		require.Equal(t, map[string]int{"a:1": 1}, sent, "%s is sent to a alone", op)
	}
	for _, op := range []string{opListSnapshots, opCapacity} {
		clear(sent)
		resp, err := c.route(t.Context(), "hp", op, struct{}{}, local)
		require.NoError(t, err, op)
		require.Equal(t, "b", resp.GetNode())
		require.Equal(t, map[string]int{"a:1": 1, "b:1": 1}, sent, "%s goes on to b", op)
	}
}
