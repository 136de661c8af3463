package agent_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/csi/catalog"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
)

// damage prepares a data dir whose state file opens but holds a bad record.
var damage = []struct {
	name    string
	prepare func(t *testing.T, dir string)
	want    string
}{
	{
		name: "one bit flipped inside a stored socket path",
		prepare: func(t *testing.T, dir string) {
			a := startAgent(t, dir)
			require.NoError(t, a.Registry().RegisterPlugin(&messages.PluginInfo{Type: "csi-node", Name: "p", AllocId: "a1",
				Connection: &messages.ConnectionInfo{SocketPath: "/run/plugins/p.sock"}}))
			require.NoError(t, a.Shutdown(context.Background()))
			path := filepath.Join(dir, "state.db")
			raw, err := os.ReadFile(path)
			require.NoError(t, err)
			i := bytes.Index(raw, []byte("/run/plugins/p.sock"))
			require.GreaterOrEqual(t, i, 0)
			raw[i+5] ^= 0x04 // "/run/plugins" becomes "/run/tlugins": still a valid path
			require.NoError(t, os.WriteFile(path, raw, 0o600))
		},
		want: "checksum mismatch",
	},
	{
		name: "a record an older version accepted and this one refuses",
		prepare: func(t *testing.T, dir string) {
			s, err := storage.OpenBolt(filepath.Join(dir, "state.db"), storage.BoltOptions{})
			require.NoError(t, err)
			b, err := s.Bucket(registry.BucketName)
			require.NoError(t, err)
			value, err := proto.Marshal(&messages.StoredAllocation{Sequence: 1, Plugin: &messages.PluginInfo{
				Type: "csi-node", Name: ".", AllocId: "a1", Connection: &messages.ConnectionInfo{SocketPath: "/run/p.sock"}}})
			require.NoError(t, err)
			require.NoError(t, b.Apply([]storage.Op{storage.Put([]byte("csi-node\x00.\x00a1"), value)}))
			require.NoError(t, s.Close())
		},
		want: `plugin name must not be "."`,
	},
	{
		name: "a catalog record that does not decode",
		prepare: func(t *testing.T, dir string) {
			s, err := storage.OpenBolt(filepath.Join(dir, "state.db"), storage.BoltOptions{})
			require.NoError(t, err)
			b, err := s.Bucket(catalog.CatalogBucket)
			require.NoError(t, err)
			require.NoError(t, b.Apply([]storage.Op{storage.Put([]byte("volume/default/db"), []byte{0xff, 0xff, 0xff})}))
			require.NoError(t, s.Close())
		},
		want: `bucket "csi.catalog", record "volume/default/db": csi: catalog: catalog record corrupt: restore:`,
	},
}

func TestACorruptRecordNamesTheFlagThatRecovers(t *testing.T) {
	for _, d := range damage {
		t.Run(d.name, func(t *testing.T) {
			dir := dataDir(t)
			require.NoError(t, os.MkdirAll(dir, 0o700))
			d.prepare(t, dir)

			cfg := agent.Config{DataDir: dir, Logger: probe.Logger(t), NodeID: "n1", ResyncInterval: time.Second}
			_, err := agent.Start(cfg)
			require.ErrorIs(t, err, storage.ErrCorrupt)
			require.ErrorContains(t, err, d.want)
			require.ErrorContains(t, err, "-reset-corrupt-state")
			moved, _ := filepath.Glob(filepath.Join(dir, "state.db.corrupt-*"))
			require.Empty(t, moved, "nothing is moved without the flag")

			cfg.ResetCorruptState = true
			a, err := agent.Start(cfg)
			require.NoError(t, err, "the flag recovers")
			t.Cleanup(func() { require.NoError(t, a.Shutdown(context.Background())) })
			require.Empty(t, a.Registry().ListPlugins(""), "the agent starts with an empty store")
			moved, _ = filepath.Glob(filepath.Join(dir, "state.db.corrupt-*"))
			require.Len(t, moved, 1, "the damaged file is kept for inspection")
		})
	}
}
