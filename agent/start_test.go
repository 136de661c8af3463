package agent_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/agent"
)

// A start that fails says so once, in its error, and logs nothing: no
// start-up chatter, no teardown.
func TestAFailedStartReturnsOneErrorAndLogsNothing(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { busy.Close() })

	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, dir string) agent.Config
		want    string
	}{
		{
			name: "the TCP port is taken by another process",
			prepare: func(t *testing.T, dir string) agent.Config {
				return agent.Config{HTTPAddr: busy.Addr().String(), HTTPInsecure: true}
			},
			want: "address already in use",
		},
		{
			name: "the token file is missing",
			prepare: func(t *testing.T, dir string) agent.Config {
				return agent.Config{HTTPAddr: "127.0.0.1:0", TokenFile: filepath.Join(dir, "no-such-file")}
			},
			want: "-token-file",
		},
		{
			name: "the state file holds a catalog record that does not decode",
			prepare: func(t *testing.T, dir string) agent.Config {
				damage[2].prepare(t, dir)
				return agent.Config{}
			},
			want: "catalog record corrupt",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := dataDir(t)
			require.NoError(t, os.MkdirAll(dir, 0o700))
			cfg := tc.prepare(t, dir)
			var log probe.LogBuffer
			cfg.DataDir, cfg.Logger, cfg.NodeID = dir, logTo(&log), "n1"
			a, err := agent.Start(cfg)
			require.Nil(t, a)
			require.ErrorContains(t, err, tc.want)
			require.Empty(t, log.String(), "a failed start logs nothing")

			// The same data dir starts once the cause is gone, and its
			// start-up is logged.
			if cfg.HTTPAddr != "" {
				cfg.HTTPAddr, cfg.TokenFile, cfg.HTTPInsecure = "", "", false
			} else {
				cfg.ResetCorruptState = true
			}
			a, err = agent.Start(cfg)
			require.NoError(t, err)
			require.Contains(t, log.String(), "agent started")
			require.NoError(t, a.Shutdown(context.Background()))
		})
	}
}
