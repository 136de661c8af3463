package embedded_test

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/fleet/embedded"
)

func TestAMemberOffLoopbackIsRefusedBeforeItStarts(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ name, client, peer string }{
		{"a client URL on every interface", "http://0.0.0.0:2379", "http://127.0.0.1:2380"},
		{"a peer URL on another host", "http://127.0.0.1:2379", "http://10.1.2.3:2380"},
	} {
		t.Run(c.name, func(t *testing.T) {
			client, err := url.Parse(c.client)
			require.NoError(t, err)
			peer, err := url.Parse(c.peer)
			require.NoError(t, err)
			_, err = embedded.Start(embedded.Config{Dir: dir, Client: client, Peer: peer})
			require.ErrorIs(t, err, embedded.ErrNotLoopback)
			require.ErrorContains(t, err, "http://127.0.0.1:PORT")
		})
	}
	require.NoDirExists(t, dir+"/member", "nothing was written")
}
