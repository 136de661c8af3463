package member

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestARouterPauseEndsWhenTheTopologyChanges: a request waiting to be sent
// again (for a member that died, say) goes as soon as the topology
// changes, not at the end of its pause; and a pause ends with its
// context too.
func TestARouterPauseEndsWhenTheTopologyChanges(t *testing.T) {
	changed := make(chan struct{})
	done := make(chan bool, 1)
	go func() { done <- pause(context.Background(), time.Hour, changed) }()
	close(changed)
	select {
	case live := <-done:
		require.True(t, live)
	case <-time.After(grainTimeout):
		t.Fatal("the pause went on after the topology changed")
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- pause(ctx, time.Hour, make(chan struct{})) }()
	cancel()
	select {
	case live := <-done:
		require.False(t, live)
	case <-time.After(grainTimeout):
		t.Fatal("the pause went on after its context ended")
	}
}
