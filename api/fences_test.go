package api_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/csi/volumes"
)

// eventFeed is a VolumeEventFeed whose events the test sends, and which closes a
// subscriber on demand as a slow one is.
type eventFeed struct{ subs chan chan volumes.Event }

func (f *eventFeed) SubscribeVolumeEvents() (<-chan volumes.Event, func()) {
	c := make(chan volumes.Event, 1)
	f.subs <- c
	return c, func() {}
}

// TestAStreamCarriesFenceEventsAndEndsLaggedWhenItFallsBehindThem follows
// the event stream: a fence event is a line of its own kind with its
// volume, alloc and target, and a stream the feed drops for lag ends with
// a "lagged" line; a stream filtered by plugin type has no fence events.
func TestAStreamCarriesFenceEventsAndEndsLaggedWhenItFallsBehindThem(t *testing.T) {
	b := newBackend(t)
	feed := &eventFeed{subs: make(chan chan volumes.Event, 1)}
	b.server.VolumeEvents = feed
	next := followEvents(t, b, "")
	var sub chan volumes.Event
	select {
	case sub = <-feed.subs:
	case <-time.After(30 * time.Second):
		t.Fatal("the stream did not subscribe to the fence events")
	}
	sub <- volumes.Event{Kind: volumes.EventClaimLost, Namespace: "default", VolumeID: "db", AllocID: "web-1",
		TargetPath: "/data/csi/hp/per-alloc/web-1/default/db", Detail: "read-only until the claim is checked"}
	var line api.Event
	require.NoError(t, json.Unmarshal(next(t), &line))
	require.Equal(t, api.Event{Kind: "claim-lost", Volume: &api.VolumeEventJSON{Namespace: "default", VolumeID: "db", AllocID: "web-1",
		TargetPath: "/data/csi/hp/per-alloc/web-1/default/db", Detail: "read-only until the claim is checked"}}, line)

	close(sub)
	require.NoError(t, json.Unmarshal(next(t), &line))
	require.Equal(t, api.KindLagged, line.Kind)
	require.Contains(t, line.Error, "fell too far behind the volume events")

	followEvents(t, b, "?type=csi-node")
	select {
	case <-feed.subs:
		t.Fatal("a stream of one plugin type subscribed to the fence events")
	default:
	}
}
