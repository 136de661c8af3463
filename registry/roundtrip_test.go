package registry_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/messages"
)

// fullPlugins sets every field of PluginInfo, on both kinds of connection,
// so that a field dropped on the way to disk or back shows.
func fullPlugins() []*messages.PluginInfo {
	return []*messages.PluginInfo{
		{
			Type: csiNode, Name: "ebs", AllocId: "alloc-1", Version: "v1.2.3",
			Connection: &messages.ConnectionInfo{SocketPath: "/run/csi/ebs.sock"},
			Options:    map[string]string{"mount-dir": "/csi", "stage": "yes"},
		},
		{
			Type: "docker-volume", Name: "net", AllocId: "spec", Version: "2",
			Connection: &messages.ConnectionInfo{
				Address: "tcp://127.0.0.1:9000",
				Tls: &messages.TLSConfig{
					InsecureSkipVerify: true, CaFile: "/etc/ca.pem", CertFile: "/etc/cert.pem", KeyFile: "/etc/key.pem",
				},
			},
			Options: map[string]string{"k": "v"},
		},
	}
}

func TestEveryFieldSurvivesARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	system := probe.NewSystem(t)

	db, bucket := openBolt(t, path)
	first := start(t, system, bucket, nil)
	for _, p := range fullPlugins() {
		require.NoError(t, first.RegisterPlugin(proto.Clone(p).(*messages.PluginInfo)))
	}
	require.NoError(t, first.Shutdown())
	require.NoError(t, db.Close())

	db, bucket = openBolt(t, path)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	second := start(t, system, bucket, nil)
	for _, want := range fullPlugins() {
		got, ok := second.Snapshot().ForAlloc(want.GetType(), want.GetName(), want.GetAllocId())
		require.True(t, ok, "plugin %s/%s is restored", want.GetType(), want.GetName())
		require.True(t, proto.Equal(want, got), "restored record differs:\nwant %v\n got %v", want, got)
	}

	// And the records on disk are the whole registrations.
	var stored []*messages.PluginInfo
	require.NoError(t, bucket.Load(func(key, value []byte) error {
		if strings.HasPrefix(string(key), "\x00") {
			return nil // the registry's own records (the durable event sequence), not registrations
		}
		var s messages.StoredAllocation
		require.NoError(t, proto.Unmarshal(value, &s))
		stored = append(stored, s.GetPlugin())
		return nil
	}))
	require.Len(t, stored, len(fullPlugins()))
	for _, want := range fullPlugins() {
		found := false
		for _, got := range stored {
			found = found || proto.Equal(want, got)
		}
		require.True(t, found, "no stored record equals %v", want)
	}
}
