package model

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// The property tests drive one volume and its plugin through random
// sequences of claims, releases, GCs, fingerprints (health changes), node and
// alloc deletions, and check after every step that:
//   - the plugin's healthy counts equal a recount of its maps;
//   - the volume's health is what PluginHealth derives from the plugin;
//   - the volume never has more writers than its access mode allows, nor
//     claims on two nodes under a single-node mode (and Validate passes);
//   - a refused claim or release returns one of the package's sentinels and
//     leaves the volume as it was;
//   - a new claim is granted exactly when a model written apart from the code
//     (plugin health recounted from the maps, resource exhaustion, a table of
//     writers per access mode, the single-node rule) says so, and CanReadOnly
//     or CanWrite agree with that model;
//   - a freed or garbage-collected claim is gone from every map;
//   - Copy of either shares no map, slice or pointer with its original, and
//     scribbling over the copy leaves the original as it was.

var (
	propAllocs = []string{"a0", "a1", "a2", "a3", "a4", "a5"}
	propNodes  = []string{"n0", "n1", "n2"}
	// claimRefusals are the errors a well-formed claim may meet.
	claimRefusals = []error{
		ErrVolumeUnschedulable, ErrWriteClaimRefused, ErrVolumeMaxClaims, ErrNodeConflict,
		ErrClaimModeConflict, ErrClaimReleasing, ErrClaimNotFound, ErrInvalidClaim,
	}
)

type catalogMachine struct {
	v *CSIVolume
	p *CSIPlugin
}

func TestPropertyRandomClaimsAndHealthChanges(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := &catalogMachine{v: healthyVolume(rapid.SampledFrom(AccessModes()).Draw(t, "mode")), p: NewCSIPlugin("ebs", 1)}
		require.NoError(t, m.v.UpdateHealth(m.p))
		actions := map[string]func(*rapid.T){
			"claim":       m.claim,
			"release":     m.release,
			"gc":          m.gc,
			"fingerprint": m.fingerprint,
			"delete node": m.deleteNode,
			"delete alloc": func(t *rapid.T) {
				m.p.DeleteAlloc(rapid.SampledFrom(propNodes).Draw(t, "node"), rapid.SampledFrom(propAllocs).Draw(t, "alloc"))
				require.NoError(t, m.v.UpdateHealth(m.p))
			},
			"exhaust": func(t *rapid.T) {
				m.v.ResourceExhausted = time.Time{}
				if rapid.IntRange(0, 3).Draw(t, "exhausted") == 0 {
					m.v.ResourceExhausted = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
				}
			},
			"copy": m.copy,
		}
		// Claims and releases come up more often than the rest.
		names := []string{"claim", "claim", "claim", "release", "release", "release", "gc",
			"fingerprint", "fingerprint", "delete node", "delete alloc", "exhaust", "copy"}
		steps := rapid.IntRange(1, 150).Draw(t, "steps")
		for range steps {
			actions[rapid.SampledFrom(names).Draw(t, "action")](t)
			m.check(t)
		}
	})
}

// someAlloc draws an alloc, most often one that holds a claim.
func (m *catalogMachine) someAlloc(t *rapid.T) string {
	held := slices.Sorted(maps.Keys(m.v.ReadClaims))
	held = append(held, slices.Sorted(maps.Keys(m.v.WriteClaims))...)
	if len(held) > 0 && rapid.IntRange(0, 3).Draw(t, "pick a holder") > 0 {
		return rapid.SampledFrom(held).Draw(t, "holder")
	}
	return rapid.SampledFrom(propAllocs).Draw(t, "alloc")
}

// claim makes a new claim in state taken and checks the answer, and
// CanReadOnly or CanWrite, against expectGranted and the node rule.
func (m *catalogMachine) claim(t *rapid.T) {
	c := &Claim{
		AllocID: rapid.SampledFrom(propAllocs).Draw(t, "alloc"),
		NodeID:  rapid.SampledFrom(propNodes).Draw(t, "node"),
		Mode:    rapid.SampledFrom([]ClaimMode{ClaimModeRead, ClaimModeWrite}).Draw(t, "claim mode"),
		State:   ClaimStateTaken,
	}
	fresh := m.v.heldClaim(c.AllocID) == nil
	can := m.expectGranted(c)
	if c.Mode == ClaimModeWrite {
		require.Equal(t, can, m.v.CanWrite(), "CanWrite")
	} else {
		require.Equal(t, can, m.v.CanReadOnly(), "CanReadOnly")
	}
	nodes := m.v.claimNodes()
	nodeOK := !m.v.AccessMode.SingleNode() || len(nodes) == 0 || slices.Equal(nodes, []string{c.NodeID})

	err := m.apply(t, c)
	if fresh {
		require.Equal(t, can && nodeOK, err == nil, "a new %s claim on %s: can=%t nodeOK=%t err=%v", c.Mode, c.NodeID, can, nodeOK, err)
	}
	if err == nil {
		require.Equal(t, c, m.v.heldClaim(c.AllocID))
	}
}

// propMaxWriters is how many writers each access mode allows, written out
// apart from the code under test.
var propMaxWriters = map[AccessMode]int{
	AccessModeSingleNodeReader:      0,
	AccessModeSingleNodeWriter:      1,
	AccessModeMultiNodeReader:       0,
	AccessModeMultiNodeSingleWriter: 1,
	AccessModeMultiNodeMultiWriter:  math.MaxInt, // unbounded: CanWrite stays true even once every alloc writes
}

// expectGranted says, from the plugin's maps and the access mode table rather
// than from the volume's own predicates, whether a new claim of c's mode can
// be granted, leaving the node rule aside.
func (m *catalogMachine) expectGranted(c *Claim) bool {
	var controllers, nodes int
	for _, info := range m.p.Controllers {
		controllers += healthy(info)
	}
	for _, info := range m.p.Nodes {
		nodes += healthy(info)
	}
	ok := nodes > 0 && (!m.p.ControllerRequired || controllers > 0) && m.v.ResourceExhausted.IsZero()
	if c.Mode == ClaimModeWrite {
		ok = ok && len(m.v.WriteClaims) < propMaxWriters[m.v.AccessMode]
	}
	return ok
}

// release moves a claim, most often a held one, towards being freed.
func (m *catalogMachine) release(t *rapid.T) {
	alloc := m.someAlloc(t)
	state := rapid.SampledFrom([]ClaimState{ClaimStateUnpublishing, ClaimStateNodeDetached,
		ClaimStateControllerDetached, ClaimStateReadyToFree}).Draw(t, "state")
	c := readClaim(alloc, rapid.SampledFrom(propNodes).Draw(t, "node"))
	if held := m.v.heldClaim(alloc); held != nil && rapid.IntRange(0, 9).Draw(t, "mismatch") > 0 {
		c = held
	}
	if m.apply(t, moved(c, state)) == nil && state == ClaimStateReadyToFree {
		require.Nil(t, m.v.heldClaim(alloc), "a freed claim must be gone")
		require.NotContains(t, m.v.PastClaims, alloc)
	}
}

// apply runs v.Claim(c) and checks that a refusal is a known one and
// changed nothing.
func (m *catalogMachine) apply(t *rapid.T, c *Claim) error {
	before := m.v.Copy()
	err := m.v.Claim(c)
	if err != nil {
		require.True(t, slices.ContainsFunc(claimRefusals, func(e error) bool { return errors.Is(err, e) }),
			"unexpected error %v", err)
		require.Equal(t, before, m.v, "refused claim %+v changed the volume", c)
	}
	return err
}

func (m *catalogMachine) gc(t *rapid.T) {
	alloc := m.someAlloc(t)
	had := m.v.heldClaim(alloc) != nil
	require.Equal(t, had, m.v.GC(alloc))
	require.Nil(t, m.v.heldClaim(alloc))
	require.NotContains(t, m.v.PastClaims, alloc)
}

// fingerprint records a random fingerprint: a node going healthy or
// unhealthy, a new alloc replacing an old one, a monolith.
func (m *catalogMachine) fingerprint(t *rapid.T) {
	kind := rapid.IntRange(0, 2).Draw(t, "kind") // 0 controller, 1 node, 2 monolith
	info := fingerprint(rapid.SampledFrom(propAllocs).Draw(t, "alloc"), rapid.Bool().Draw(t, "healthy"), kind != 1, kind != 0)
	info.RequiresControllerPlugin = rapid.Bool().Draw(t, "requires controller")
	require.NoError(t, m.p.AddPlugin(rapid.SampledFrom(propNodes).Draw(t, "node"), info))
	require.NoError(t, m.v.UpdateHealth(m.p))
}

func (m *catalogMachine) deleteNode(t *rapid.T) {
	node := rapid.SampledFrom(propNodes).Draw(t, "node")
	_, c := m.p.Controllers[node]
	_, n := m.p.Nodes[node]
	require.Equal(t, c || n, m.p.DeleteNode(node))
	require.NoError(t, m.v.UpdateHealth(m.p))
}

// copy checks that copies of the volume and the plugin are deep.
func (m *catalogMachine) copy(t *rapid.T) {
	requireDeepCopy(t, m.v, m.v.Copy(), scribbleVolume)
	requireDeepCopy(t, m.p, m.p.Copy(), scribblePlugin)
}

// check holds after every step.
func (m *catalogMachine) check(t *rapid.T) {
	requireCountsMatchMaps(t, m.p)
	require.Equal(t, PluginHealth(m.p), m.v.Health)
	require.LessOrEqual(t, len(m.v.WriteClaims), propMaxWriters[m.v.AccessMode],
		fmt.Sprintf("%s volume has writers %s", m.v.AccessMode, joinKeys(m.v.WriteClaims)))
	if m.v.AccessMode.SingleNode() {
		require.LessOrEqual(t, len(m.v.claimNodes()), 1, "single-node volume claimed on %v", m.v.claimNodes())
	}
	require.NoError(t, m.v.Validate())
}
