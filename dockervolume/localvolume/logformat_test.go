package localvolume_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/dockervolume/localvolume"
)

func TestThePluginLogsInTheAgentsFormat(t *testing.T) {
	dir, err := os.MkdirTemp("", "pvlv")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	logs := probe.RunUntilLogged(t, func(ctx context.Context, stderr io.Writer) error {
		return localvolume.Run(ctx, []string{"-socket", filepath.Join(dir, "local.sock"), "-root", filepath.Join(dir, "vols")}, stderr)
	}, "serving")
	// As the agent's hclog lines: 2026-11-26T01:27:57.293Z [INFO]  plugvisor.registry: registry started: ...
	require.Regexp(t, `(?m)^\d{4}-\d\d-\d\dT[\d:.]+Z? \[INFO\]  docker-volume-plugin: docker volume plugin serving: socket=\S+ root=`, logs)
	require.NotContains(t, logs, "level=INFO", "not slog's text format")
}
