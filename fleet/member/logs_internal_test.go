package member

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestALostConnectionIsNoErrorAndACleanCloseIsNoWarning logs protoactor's
// records of a connection to another member with the errors a connection
// ends with: a close by either side, or any trouble with a member that
// left the fleet, is dropped below warning level, any other trouble is a
// warning, a failed gossip exchange is dropped below warning level always,
// and other records pass as they are.
func TestALostConnectionIsNoErrorAndACleanCloseIsNoWarning(t *testing.T) {
	refused := status.Error(codes.Unavailable, "dial tcp 127.0.0.1:1: connect: connection refused")
	cases := []struct {
		name string
		msg  string
		err  error
		left bool
		want string
	}{
		{"this member closed it", lostConnection, status.Error(codes.Canceled, "grpc: the client connection is closing"), false, ""},
		{"the other member's server closed it", lostConnection, status.Error(codes.Unavailable, "error reading from server: EOF"), false, ""},
		{"a bare EOF", lostConnection, io.EOF, false, ""},
		{"the other member vanished", lostConnection, status.Error(codes.Unavailable, "read: connection reset by peer"), false, "level=WARN"},
		{"the other member vanished as it left", lostConnection, status.Error(codes.Unavailable, "read: connection reset by peer"), true, ""},
		{"a dial to a member that left", "EndpointWriter failed to connect", refused, true, ""},
		{"its stream", "EndpointWriter failed to create receive stream", refused, true, ""},
		{"a dial to a member still in the fleet", "EndpointWriter failed to connect", refused, false, "level=WARN"},
		{"a grain request protoactor retries", "cluster.RequestFuture failed", errors.New("future: dead letter"), false, "level=WARN"},
		{"another error", "EndpointWriter failed to serialize message", errors.New("boom"), true, "level=ERROR"},
		{"a gossip exchange with a member still in the fleet", gossipFailed, errors.New("future: timeout"), false, ""},
		{"another gossip error", "sendGossipForMember received unknown response message", errors.New("boom"), false, "level=ERROR"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			left := func(address string) bool {
				require.Equal(t, "127.0.0.1:1", address)
				return c.left
			}
			log := slog.New(peerLoss{minLevel{slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}), slog.LevelWarn}, left})
			log.Error(c.msg, slog.String("address", "127.0.0.1:1"), slog.Any("error", c.err))
			if c.want == "" {
				require.Empty(t, out.String())
				return
			}
			require.Contains(t, out.String(), c.want)
			require.Contains(t, out.String(), "address=127.0.0.1:1", "the record keeps its attributes")
		})
	}
}

// TestAFailedGossipExchangeIsLoggedAtDebug logs protoactor's record of a
// failed gossip exchange as its gossip actor does: it is kept, at debug.
func TestAFailedGossipExchangeIsLoggedAtDebug(t *testing.T) {
	var out bytes.Buffer
	log := slog.New(peerLoss{slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}), nil})
	log.Warn(gossipFailed, slog.String("MemberId", "PrPzzXg9DPkigmAS7hMtSu"), slog.Any("error", errors.New("future: timeout")))
	require.Contains(t, out.String(), "level=DEBUG")
	require.Contains(t, out.String(), `error="future: timeout"`, "the record keeps its attributes")
}
