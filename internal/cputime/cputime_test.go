package cputime_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/internal/cputime"
)

// TestUsedGrowsWithWork spins for 50 ms of wall time: the CPU time used
// grows by some of it, and never goes back.
func TestUsedGrowsWithWork(t *testing.T) {
	before := cputime.Used()
	require.Positive(t, before, "a running test has used CPU")
	x := 0
	for start := time.Now(); time.Since(start) < 50*time.Millisecond; {
		x++
	}
	require.Positive(t, x)
	require.Greater(t, cputime.Used(), before)
}
