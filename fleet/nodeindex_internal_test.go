package fleet

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
)

const testRoot = "/plugvisor/claims/"

func TestAnIndexKeyNamesItsNodeAndVolume(t *testing.T) {
	node, ref, err := parseIndexed(testRoot, testRoot+"node-a/default/db")
	require.NoError(t, err)
	require.Equal(t, "node-a", node)
	require.Equal(t, volumeRef{ns: "default", id: "db"}, ref)
}

func TestAMalformedIndexKeyIsCorruptAndSaysWhy(t *testing.T) {
	for _, tt := range []struct {
		name, key, says string
	}{
		{"a key under another root", "/plugvisor/attachments/node-a/default/db", "an index key is /plugvisor/claims/<node>/<namespace>/<volume ID>"},
		{"the root alone", testRoot, "an index key is"},
		{"no volume ID", testRoot + "node-a/default", "an index key is"},
		{"a part too many", testRoot + "node-a/default/db/extra", "an index key is"},
		{"an empty node", testRoot + "/default/db", "node ID"},
		{"an empty namespace", testRoot + "node-a//db", "namespace"},
		{"an empty volume ID", testRoot + "node-a/default/", "volume ID"},
		{"a dot-dot volume ID", testRoot + "node-a/default/..", "volume ID"},
		{"a control character in the node", testRoot + "node\x01a/default/db", "node ID"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := parseIndexed(testRoot, tt.key)
			require.ErrorIs(t, err, model.ErrCorrupt)
			require.ErrorContains(t, err, tt.says)
			require.ErrorContains(t, err, "etcdctl del", "the error says the remedy")
			require.NotContains(t, err.Error(), "good record", "an index key has no record to put back")
		})
	}
}

func FuzzParseIndexed(f *testing.F) {
	for _, seed := range []string{testRoot + "node-a/default/db", testRoot, testRoot + "a/b", testRoot + "a/b/c/d", "x", testRoot + "a//c"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, key string) {
		node, ref, err := parseIndexed(testRoot, key)
		if err != nil {
			require.ErrorIs(t, err, model.ErrCorrupt)
			return
		}
		require.Equal(t, key, testRoot+node+"/"+ref.ns+"/"+ref.id, "a key it takes is the key of what it names")
		require.NotContains(t, node+ref.ns+ref.id, "/")
		require.False(t, strings.Contains(key, "\x00"))
	})
}
