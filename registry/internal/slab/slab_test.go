package slab_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry/internal/slab"
)

// TestEventSlabHandsOutEachEventOnceZeroed: across several arrays, every
// event a Slab hands out is zeroed and distinct, and one filled
// before keeps its fields while later ones are handed out and filled.
func TestEventSlabHandsOutEachEventOnceZeroed(t *testing.T) {
	var s slab.Slab[messages.PluginRegistered]
	seen := map[*messages.PluginRegistered]bool{}
	var handed []*messages.PluginRegistered
	for i := range 3*slab.Len + 1 {
		e := s.Next()
		require.False(t, seen[e], "event %d handed out twice", i)
		require.True(t, proto.Equal(e, &messages.PluginRegistered{}), "event %d is not zeroed: %v", i, e)
		seen[e] = true
		e.Sequence = uint64(i + 1)
		handed = append(handed, e)
	}
	for i, e := range handed {
		require.EqualValues(t, i+1, e.GetSequence(), "event %d changed after it was handed out", i)
	}
}
