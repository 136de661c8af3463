package member

import (
	"context"
	"errors"
	"testing"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/stretchr/testify/require"
)

func TestAJoiningMemberIsRefusedOnlyWhenNoPeerAcceptsItsTLS(t *testing.T) {
	peers := []*cluster.Member{{Id: "self", Host: "127.0.0.1", Port: 1}, {Id: "a", Host: "127.0.0.1", Port: 2},
		{Id: "b", Host: "127.0.0.1", Port: 3}}
	unreachable := errors.New("connection refused")
	for _, tc := range []struct {
		name    string
		answers map[string]error
		refused bool
	}{
		{"a peer accepts", map[string]error{"127.0.0.1:2": errTLSRefused, "127.0.0.1:3": nil}, false},
		{"every peer refuses", map[string]error{"127.0.0.1:2": errTLSRefused, "127.0.0.1:3": errTLSRefused}, true},
		{"one refuses, the other cannot be reached", map[string]error{"127.0.0.1:2": unreachable, "127.0.0.1:3": errTLSRefused}, true},
		{"no peer can be reached (gone, keys not yet expired)", map[string]error{"127.0.0.1:2": unreachable, "127.0.0.1:3": unreachable}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked []string
			check := func(_ context.Context, address string) error {
				asked = append(asked, address)
				return tc.answers[address]
			}
			err := checkPeers(context.Background(), check, "self", peers)
			require.NotContains(t, asked, "127.0.0.1:1", "a member does not check itself")
			if !tc.refused {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrPeerTLS)
			require.ErrorContains(t, err, "b at 127.0.0.1:3")
		})
	}
}
