package volumes

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAFenceSubscriberThatFallsBehindIsDroppedAndTheOthersGoOn: the feed
// never blocks the volume manager on a slow stream; the slow one's channel
// is closed after what it had buffered, the others get every event.
func TestAFenceSubscriberThatFallsBehindIsDroppedAndTheOthersGoOn(t *testing.T) {
	var f eventFeed
	slow, _ := f.subscribe()
	fast, cancel := f.subscribe()
	defer cancel()
	got := 0
	for i := range eventFeedBuffer + 10 {
		f.publish(Event{Kind: EventClaimLost, AllocID: string(rune('a' + i%26))})
		<-fast
		got++
	}
	require.Equal(t, eventFeedBuffer+10, got)
	n := 0
	for range slow {
		n++
	}
	require.Equal(t, eventFeedBuffer, n, "the slow subscriber keeps what it had buffered, then its channel is closed")
}
