//go:build reliability

package reliability_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/storage"
	"github.com/plugvisor/plugvisor/storage/storagetest"
)

// TestBitFlipsByPageKind flips one bit at a time in each kind of page (meta,
// freelist, branch, leaf) of a state file with branch pages: 200
// registrations of 15 KB of options each (issue 23, where a flip in a branch
// element's pos crashed the agent inside bbolt). Each start must refuse,
// naming -reset-corrupt-state, which then moves the file aside and starts,
// or serve the registrations as written; a crash ends the run.
func TestBitFlipsByPageKind(t *testing.T) {
	const perKind = 50
	src := shortDir(t)
	a := startAgent(t, src)
	options := map[string]string{}
	for i := range 4 {
		options[fmt.Sprintf("pad%d", i)] = strings.Repeat("o", 3800)
	}
	register := func(i int) {
		status, body, err := a.do("POST", "/v1/plugins", registerBody(fmt.Sprintf("page-%03d", i), "a1", options))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status, body)
	}
	for i := range 199 {
		register(i)
	}
	previousOrig := copyState(t, src)
	register(199)
	_, err := a.stop()
	require.NoError(t, err)
	orig, err := os.ReadFile(filepath.Join(src, "state.db"))
	require.NoError(t, err)
	open := func(data []byte, reset bool) (*agent.Agent, error) {
		d := shortDir(t)
		require.NoError(t, os.WriteFile(filepath.Join(d, "state.db"), data, 0o600))
		return agent.Start(agent.Config{DataDir: d, NodeID: "n1", ResetCorruptState: reset,
			ResyncInterval: time.Hour, FingerprintInterval: time.Hour})
	}
	served := func(data []byte) []*messages.PluginInfo {
		base, err := open(data, false)
		require.NoError(t, err)
		defer func() { require.NoError(t, base.Shutdown(t.Context())) }()
		return base.Registry().ListPlugins("")
	}
	want, previous := served(orig), served(previousOrig)
	require.Len(t, want, 200)
	require.Len(t, previous, 199)

	flips, err := storagetest.PageFlips(orig, perKind, rand.New(rand.NewPCG(23, 23)))
	require.NoError(t, err)
	refused, started := map[string]int{}, map[string]int{}
	var altered, fellBack, other, recovered int
	for _, f := range flips {
		a, err := open(f.Apply(orig), false)
		switch {
		case err == nil:
			got := a.Registry().ListPlugins("")
			switch {
			case equalLists(want, got):
			case f.Kind == "meta" && equalLists(previous, got):
				fellBack++ // bbolt's fallback to the other meta page, as after a torn write
			default:
				altered++
			}
			started[f.Kind]++
			require.NoError(t, a.Shutdown(t.Context()))
			continue
		case errors.Is(err, storage.ErrCorrupt) && strings.Contains(err.Error(), "-reset-corrupt-state"):
			refused[f.Kind]++
		default:
			other++
		}
		if a, err := open(f.Apply(orig), true); err == nil {
			recovered++
			require.NoError(t, a.Shutdown(t.Context()))
		}
	}
	total := len(flips) - started["meta"] - started["freelist"] - started["branch"] - started["leaf"]
	report("bit flips by page kind in a multi-level state.db", verdict(altered == 0 && other == 0 && recovered == total),
		"%d flips (%d each in meta, freelist, branch, leaf pages; 200 registrations of 15 KB): 0 crashes; refused naming -reset-corrupt-state: meta %d, freelist %d, branch %d, leaf %d; served unchanged: %d; served the commit before (a damaged newer meta page, which bbolt takes for a torn write): %d; served altered: %d; other errors: %d; %d of %d refused files started with the flag",
		len(flips), perKind, refused["meta"], refused["freelist"], refused["branch"], refused["leaf"],
		len(flips)-total-altered-fellBack, fellBack, altered, other, recovered, total)
	require.Zero(t, altered, "a flipped bit changed the registrations the agent served")
	require.Zero(t, other, "a refusal that does not name the flag")
	require.Equal(t, total, recovered, "-reset-corrupt-state recovers every refused file")
}

// copyState returns the state file of dir, copied while the agent runs:
// the registrations before the last are committed, and no other write is
// in flight.
func copyState(t *testing.T, dir string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "state.db"))
	require.NoError(t, err)
	return data
}
