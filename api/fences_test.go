package api_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/csi/volumes"
)

// fenceFeed is a FenceFeed whose events the test sends, and which closes a
// subscriber on demand as a slow one is.
type fenceFeed struct{ subs chan chan volumes.FenceEvent }

func (f *fenceFeed) SubscribeFences() (<-chan volumes.FenceEvent, func()) {
	c := make(chan volumes.FenceEvent, 1)
	f.subs <- c
	return c, func() {}
}

// TestAStreamCarriesFenceEventsAndEndsLaggedWhenItFallsBehindThem follows
// the event stream: a fence event is a line of its own kind with its
// volume, alloc and target, and a stream the feed drops for lag ends with
// a "lagged" line; a stream filtered by plugin type has no fence events.
func TestAStreamCarriesFenceEventsAndEndsLaggedWhenItFallsBehindThem(t *testing.T) {
	b := newBackend(t)
	feed := &fenceFeed{subs: make(chan chan volumes.FenceEvent, 1)}
	b.server.Fences = feed
	next := followEvents(t, b, "")
	var sub chan volumes.FenceEvent
	select {
	case sub = <-feed.subs:
	case <-time.After(30 * time.Second):
		t.Fatal("the stream did not subscribe to the fence events")
	}
	sub <- volumes.FenceEvent{Kind: volumes.FenceClaimLost, Namespace: "default", VolumeID: "db", AllocID: "web-1",
		TargetPath: "/data/csi/hp/per-alloc/web-1/default/db", Detail: "read-only until the claim is checked"}
	var line api.Event
	require.NoError(t, json.Unmarshal(next(t), &line))
	require.Equal(t, api.Event{Kind: "claim-lost", Fence: &api.FenceJSON{Namespace: "default", VolumeID: "db", AllocID: "web-1",
		TargetPath: "/data/csi/hp/per-alloc/web-1/default/db", Detail: "read-only until the claim is checked"}}, line)

	close(sub)
	require.NoError(t, json.Unmarshal(next(t), &line))
	require.Equal(t, api.KindLagged, line.Kind)
	require.Contains(t, line.Error, "fell too far behind the fence events")

	followEvents(t, b, "?type=csi-node")
	select {
	case <-feed.subs:
		t.Fatal("a stream of one plugin type subscribed to the fence events")
	default:
	}
}
