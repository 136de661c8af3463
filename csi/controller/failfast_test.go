package controller_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/controller"
	"github.com/plugvisor/plugvisor/csi/csitest"
)

// TestAControllerWhoseSocketIsMissingOrDeadFailsAtOnce: a controller
// registered at a socket that does not exist, or that nothing listens on
// (its plugin died and left the file), fails the operation at its first
// dial with csi.ErrConnect and the reason, as the node path does, not at
// the end of the dial timeout (a minute here). Nothing changes.
func TestAControllerWhoseSocketIsMissingOrDeadFailsAtOnce(t *testing.T) {
	f := newFixture(t, func(c *controller.Config) { c.RPCTimeout = time.Minute })
	dead := csitest.SocketPath(t)
	l, err := net.Listen("unix", dead)
	require.NoError(t, err)
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	require.NoError(t, l.Close())

	for socket, want := range map[string]string{csitest.SocketPath(t): "the socket does not exist", dead: "nothing listens on the socket"} {
		f.registerController(plugin, socket)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		_, err := f.ctl.Create(ctx, createRequest())
		cancel()
		require.ErrorIs(t, err, csi.ErrConnect)
		require.ErrorIs(t, err, controller.ErrControllerUnreachable)
		require.NotErrorIs(t, err, context.DeadlineExceeded, "the dial waited for its timeout")
		require.ErrorContains(t, err, want)
		require.ErrorContains(t, err, `plugin "disk"`)
		require.Empty(t, f.volumes(), "nothing changed")
	}
}
