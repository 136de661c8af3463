package volumes

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/messages"
)

// TestTheStagingSweepRemovesOnlyTheDirectoriesOfIdleVolumes sweeps a
// root where volumes are in every state the sweep tells apart, and checks
// which of their staging directories stay.
func TestTheStagingSweepRemovesOnlyTheDirectoriesOfIdleVolumes(t *testing.T) {
	root := t.TempDir()
	m := &manager{env: &env{paths: paths{root: root}}, log: hclog.NewNullLogger(),
		queues: map[volumeKey]*queue{}, records: map[volumeKey]*messages.VolumeRecord{}}
	dir := func(plugin, ns, id string) string { return filepath.Join(root, plugin, StagingDirName, ns, id) }
	for _, d := range []string{dir("a", "ns1", "running"), dir("a", "ns1", "waiting"), dir("a", "ns1", "staged"),
		dir("a", "ns1", "idle"), dir("b", "ns1", "staged"), dir("a", "ns1", "full"), dir("a", "ns2", "idle")} {
		require.NoError(t, os.MkdirAll(d, 0o700))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir("a", "ns1", "full"), "f"), nil, 0o600))
	m.queues[volumeKey{"ns1", "running"}] = &queue{running: &op{kind: opMount}}
	m.queues[volumeKey{"ns1", "waiting"}] = &queue{running: &op{kind: opReconcile}, pending: []*op{{kind: opMount}}}
	// A stage under plugin a: plugin b's directory of the same volume is idle.
	m.records[volumeKey{"ns1", "staged"}] = &messages.VolumeRecord{Stage: &messages.VolumeStage{StagingPath: dir("a", "ns1", "staged")}}

	require.Equal(t, 3, m.sweepStaging())
	for _, kept := range []string{dir("a", "ns1", "running"), dir("a", "ns1", "waiting"), dir("a", "ns1", "staged"), dir("a", "ns1", "full")} {
		require.DirExists(t, kept)
	}
	for _, gone := range []string{dir("a", "ns1", "idle"), dir("b", "ns1", "staged"), filepath.Dir(dir("a", "ns2", "idle"))} {
		require.NoDirExists(t, gone)
	}
	require.DirExists(t, filepath.Dir(dir("b", "ns1", "staged")), "a namespace with an operation running keeps its directory")
}
