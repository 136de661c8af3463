package hostpath_test

import (
	"context"
	"io"
	"path/filepath"
	"testing"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi/hostpath"
)

func TestThePluginLogsInTheAgentsFormat(t *testing.T) {
	probe.RequireAgentLogFormat(t, func(ctx context.Context, dir string, stderr io.Writer) error {
		return hostpath.Run(ctx, []string{"-endpoint", filepath.Join(dir, "hp.sock"), "-root", filepath.Join(dir, "root")}, stderr)
	}, "serving", `hostpath-csi: hostpath: serving: address=\S+hp\.sock$`)
}
