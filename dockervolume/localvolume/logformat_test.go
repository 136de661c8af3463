package localvolume_test

import (
	"context"
	"io"
	"path/filepath"
	"testing"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/dockervolume/localvolume"
)

func TestThePluginLogsInTheAgentsFormat(t *testing.T) {
	probe.RequireAgentLogFormat(t, func(ctx context.Context, dir string, stderr io.Writer) error {
		return localvolume.Run(ctx, []string{"-socket", filepath.Join(dir, "local.sock"), "-root", filepath.Join(dir, "vols")}, stderr)
	}, "serving", `docker-volume-plugin: docker volume plugin serving: socket=\S+ root=`)
}
