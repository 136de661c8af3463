package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
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
	"github.com/plugvisor/plugvisor/storage/storagetest"
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
			b, err := s.Bucket(catalog.Bucket)
			require.NoError(t, err)
			require.NoError(t, b.Apply([]storage.Op{storage.Put([]byte("volume/default/db"), []byte{0xff, 0xff, 0xff})}))
			require.NoError(t, s.Close())
		},
		want: `bucket "csi.catalog", record "volume/default/db": catalog record corrupt: restore:`,
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

// TestAFlippedBitInAnyPageKindNeverCrashesTheAgent starts the agent on a
// state file with branch pages (200 registrations of 15 KB of options each)
// with a bit flipped in each kind of page, among them the flip of a branch
// element's pos that crashed the agent inside bbolt (issue 23). Each start
// refuses the file, naming -reset-corrupt-state, which then moves it aside
// and starts, or serves the registrations as they were written (or, for a
// damaged newer meta page, as they were one commit before).
func TestAFlippedBitInAnyPageKindNeverCrashesTheAgent(t *testing.T) {
	dir := dataDir(t)
	a := startAgent(t, dir)
	options := map[string]string{}
	for i := range 4 {
		options[fmt.Sprintf("pad%d", i)] = strings.Repeat("o", 3800)
	}
	var previous []*messages.PluginInfo // before the last registration
	for i := range 200 {
		previous = a.Registry().ListPlugins("")
		require.NoError(t, a.Registry().RegisterPlugin(&messages.PluginInfo{Type: "csi-node", Name: fmt.Sprintf("p%03d", i), AllocId: "a1",
			Connection: &messages.ConnectionInfo{SocketPath: fmt.Sprintf("/run/absent/p%03d.sock", i)}, Options: options}))
	}
	want := a.Registry().ListPlugins("")
	require.NoError(t, a.Shutdown(context.Background()))
	orig, err := os.ReadFile(filepath.Join(dir, "state.db"))
	require.NoError(t, err)
	flips, err := storagetest.PageFlips(orig, 2, rand.New(rand.NewPCG(23, 6)))
	require.NoError(t, err)

	for _, f := range flips {
		d := dataDir(t)
		require.NoError(t, os.WriteFile(filepath.Join(d, "state.db"), f.Apply(orig), 0o600))
		cfg := agent.Config{DataDir: d, Logger: probe.Logger(t), NodeID: "n1", ResyncInterval: time.Hour, FingerprintInterval: time.Hour}
		a, err := agent.Start(cfg)
		if err == nil {
			got := a.Registry().ListPlugins("")
			require.NoError(t, a.Shutdown(context.Background()))
			fellBack := f.Kind == "meta" && sameList(previous, got) // bbolt took the newer meta page for a torn write
			require.True(t, sameList(want, got) || fellBack, "%v: the agent serves the registrations as written", f)
			continue
		}
		require.ErrorIs(t, err, storage.ErrCorrupt, f.String())
		require.ErrorContains(t, err, "-reset-corrupt-state", f.String())
		cfg.ResetCorruptState = true
		a, err = agent.Start(cfg)
		require.NoError(t, err, "%v: the flag moves the file aside and starts", f)
		require.Empty(t, a.Registry().ListPlugins(""), f.String())
		require.NoError(t, a.Shutdown(context.Background()))
		moved, _ := filepath.Glob(filepath.Join(d, "state.db.corrupt-*"))
		require.Len(t, moved, 1, f.String())
	}
}

// sameList reports whether two lists of plugins are equal.
func sameList(a, b []*messages.PluginInfo) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}
