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
// lost-connection record with the errors a connection ends with: a close
// by either side is dropped below warning level, any other loss is a
// warning, and other records pass as they are.
func TestALostConnectionIsNoErrorAndACleanCloseIsNoWarning(t *testing.T) {
	cases := []struct {
		name string
		msg  string
		err  error
		want string
	}{
		{"this member closed it", lostConnection, status.Error(codes.Canceled, "grpc: the client connection is closing"), ""},
		{"the other member's server closed it", lostConnection, status.Error(codes.Unavailable, "error reading from server: EOF"), ""},
		{"a bare EOF", lostConnection, io.EOF, ""},
		{"the other member vanished", lostConnection, status.Error(codes.Unavailable, "read: connection reset by peer"), "level=WARN"},
		{"another error", "EndpointWriter failed to send connect request", errors.New("boom"), "level=ERROR"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			log := slog.New(peerLoss{minLevel{slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}), slog.LevelWarn}})
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
