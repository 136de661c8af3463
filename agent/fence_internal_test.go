package agent

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/volumes"
)

// TestAFenceSubscriberThatFallsBehindIsDroppedAndTheOthersGoOn: the feed
// never blocks the volume manager on a slow stream; the slow one's channel
// is closed after what it had buffered, the others get every event.
func TestAFenceSubscriberThatFallsBehindIsDroppedAndTheOthersGoOn(t *testing.T) {
	var f fenceFeed
	slow, _ := f.SubscribeFences()
	fast, cancel := f.SubscribeFences()
	defer cancel()
	got := 0
	for i := range fenceFeedBuffer + 10 {
		f.publish(volumes.FenceEvent{Kind: volumes.FenceClaimLost, AllocID: string(rune('a' + i%26))})
		<-fast
		got++
	}
	require.Equal(t, fenceFeedBuffer+10, got)
	n := 0
	for range slow {
		n++
	}
	require.Equal(t, fenceFeedBuffer, n, "the slow subscriber keeps what it had buffered, then its channel is closed")
}
