package hostpath_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi/hostpath"
)

func TestThePluginLogsInTheAgentsFormat(t *testing.T) {
	dir, err := os.MkdirTemp("", "pvhp")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	logs := probe.RunUntilLogged(t, func(ctx context.Context, stderr io.Writer) error {
		return hostpath.Run(ctx, []string{"-endpoint", filepath.Join(dir, "hp.sock"), "-root", filepath.Join(dir, "root")}, stderr)
	}, "serving")
	// As the agent's hclog lines: 2026-11-26T01:27:57.293Z [INFO]  plugvisor.registry: registry started: ...
	require.Regexp(t, `(?m)^\d{4}-\d\d-\d\dT[\d:.]+Z? \[INFO\]  hostpath-csi: hostpath: serving: address=\S+hp\.sock$`, logs)
	require.NotContains(t, logs, "level=INFO", "not slog's text format")
}
