package registry_test

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
)

// maxSequence is the highest sequence number a registry hands out or
// loads: 2^63-1.
const maxSequence = math.MaxInt64

// writeRecord leaves key and value in the registry's bucket of a new bbolt
// file, and returns the file's path.
func writeRecord(t *testing.T, key string, value []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	db, bucket := openBolt(t, path)
	require.NoError(t, bucket.Apply([]storage.Op{storage.Put([]byte(key), value)}))
	require.NoError(t, db.Close())
	return path
}

func TestASequenceBeyondTheLastIsACorruptRecord(t *testing.T) {
	const key = "csi-node\x00my-plugin\x00alloc-0"
	cases := []struct {
		name string
		key  string
		val  []byte
		want string
	}{
		{"an allocation's order", key, mustMarshal(t, &messages.StoredAllocation{
			Plugin: plugin(0), Sequence: maxSequence + 1, Changed: maxSequence + 1}), "sequence"},
		{"an allocation's changed", key, mustMarshal(t, &messages.StoredAllocation{
			Plugin: plugin(0), Sequence: 7, Changed: math.MaxUint64}), "changed"},
		{"the last sequence", "\x00sequence", protowire.AppendVarint(nil, maxSequence+1), "sequence record"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := writeRecord(t, tc.key, tc.val)
			r, err := registry.Open(path, registry.OpenOptions{Config: registry.Config{Logger: probe.Logger(t)}})
			if err == nil {
				require.NoError(t, r.Close())
			}
			require.ErrorIs(t, err, storage.ErrCorrupt, "a sequence no registry hands out is corruption")
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "is beyond the last, 9223372036854775807")
			require.ErrorContains(t, err, "-reset-corrupt-state", "the error names the remedy")
		})
	}
}

func TestAWriteAfterTheLastSequenceIsRefused(t *testing.T) {
	path := writeRecord(t, "\x00sequence", protowire.AppendVarint(nil, maxSequence-1))
	r, err := registry.Open(path, registry.OpenOptions{Config: registry.Config{Logger: probe.Logger(t), Dispensers: echoDispensers()}})
	require.NoError(t, err, "a sequence below the last loads")
	t.Cleanup(func() { require.NoError(t, r.Close()) })

	require.NoError(t, r.RegisterPlugin(plugin(0)), "the last sequence is handed out")
	require.Equal(t, uint64(maxSequence), r.Snapshot().Sequence())
	got := dispense(t, r)
	require.Equal(t, "alloc-0", got.GetAllocId())

	for _, err := range []error{
		r.RegisterPlugin(plugin(1)),
		r.RegisterPlugin(pluginNamed("other", 2)),
		r.DeregisterPlugin(csiNode, "my-plugin", "alloc-0"),
	} {
		require.ErrorIs(t, err, registry.ErrLimit)
		require.ErrorContains(t, err, "sequence numbers are used up")
	}
	require.Equal(t, uint64(maxSequence), r.Snapshot().Sequence(), "nothing changed")
	require.Equal(t, []string{"alloc-0"}, allocIDs(r.Snapshot().Allocations(csiNode, "my-plugin")))
	require.Empty(t, r.ListPlugins("other"))
	require.Equal(t, "v0", dispense(t, r).GetVersion())
}
