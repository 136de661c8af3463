package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/messages"
)

// The property test drives one volume through random sequences of claims
// and releases from three nodes, nodes going down (leaving) and coming
// back, and GC steps on a fake clock, and checks after every step that:
//   - the volume's claims in etcd are exactly the ones granted and not yet
//     released or freed: nothing vanishes, nothing appears;
//   - the volume never has more writers than its access mode allows, nor
//     claims on two nodes under a single-node mode;
//   - a refused claim is a refusal of the catalog (ErrClaimRefused or
//     model.ErrInvalid), never a failure;
//   - GC frees only claims of a node down for at least the grace period,
//     and frees every claim of a node it has seen down for that long.

const propGrace = time.Minute

var (
	propNodes  = []string{"n0", "n1", "n2"}
	propAllocs = []string{"a0", "a1", "a2", "a3", "a4"}
)

type propClaim struct {
	node string
	mode model.ClaimMode
}

type fleetMachine struct {
	t      *rapid.T
	cfg    func(*fleet.Config)
	srv    *etcdtest.Server
	mode   model.AccessMode
	admin  *fleet.Store // never goes down; GC runs on it
	gc     *fleet.GC
	nodes  map[string]*fleet.Store
	held   map[string]propClaim
	clock  time.Time
	downAt map[string]time.Time
	seenAt map[string]time.Time // when a GC step first saw the node down with claims
}

func TestPropertyClaimsOverThreeNodesWithNodesGoingDownAndGC(t *testing.T) {
	srv := etcdtest.Start(t)
	var run atomic.Int64
	rapid.Check(t, func(rt *rapid.T) {
		prefix := fmt.Sprintf("/prop-%d/", run.Add(1))
		m := &fleetMachine{t: rt, srv: srv, cfg: func(c *fleet.Config) { c.Prefix = prefix },
			mode:  rapid.SampledFrom(model.AccessModes()).Draw(rt, "mode"),
			nodes: map[string]*fleet.Store{}, held: map[string]propClaim{},
			clock: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), downAt: map[string]time.Time{}, seenAt: map[string]time.Time{}}
		defer m.close()
		m.admin = m.open("admin")
		var err error
		m.gc, err = fleet.StartGC(m.admin, fleet.GCConfig{Grace: propGrace})
		require.NoError(rt, err)
		for _, n := range propNodes {
			m.up(n)
		}
		_, err = m.admin.RegisterVolume(context.Background(), volume("db", m.mode))
		require.NoError(rt, err)
		actions := map[string]func(){"claim": m.claim, "release": m.release, "down": m.down, "up": m.upOne, "gc": m.step}
		names := []string{"claim", "claim", "claim", "release", "down", "down", "up", "gc", "gc", "gc"}
		for range rapid.IntRange(5, 40).Draw(rt, "steps") {
			actions[rapid.SampledFrom(names).Draw(rt, "action")]()
			m.check()
		}
	})
}

func (m *fleetMachine) open(node string) *fleet.Store {
	cfg := fleet.Config{Endpoints: m.srv.Endpoints(), NodeID: node, LeaseTTL: fleet.MinLeaseTTL, RequestTimeout: 5 * time.Second}
	m.cfg(&cfg)
	s, err := fleet.Open(context.Background(), cfg)
	require.NoError(m.t, err)
	return s
}

func (m *fleetMachine) close() {
	for _, s := range m.nodes {
		require.NoError(m.t, s.Close())
	}
	if m.gc != nil {
		m.gc.Stop()
	}
	if m.admin != nil {
		require.NoError(m.t, m.admin.Close())
	}
}

func (m *fleetMachine) up(node string) {
	s := m.open(node)
	require.NoError(m.t, s.PutFingerprints(context.Background(), []*messages.CSIFingerprint{nodePlugin("ebs", "plugin-"+node, true)}))
	m.nodes[node] = s
}

func (m *fleetMachine) upNodes() []string { return slices.Sorted(maps.Keys(m.nodes)) }
func (m *fleetMachine) downNodes() []string {
	return slices.DeleteFunc(slices.Clone(propNodes), func(n string) bool { return m.nodes[n] != nil })
}

func (m *fleetMachine) claim() {
	up := m.upNodes()
	if len(up) == 0 {
		return
	}
	node := rapid.SampledFrom(up).Draw(m.t, "node")
	alloc := rapid.SampledFrom(propAllocs).Draw(m.t, "alloc")
	c := readClaim(alloc, node)
	if rapid.Bool().Draw(m.t, "write") {
		c = writeClaim(alloc, node)
	}
	_, err := m.nodes[node].Claim(context.Background(), "", "db", c)
	if err != nil {
		if !errors.Is(err, csi.ErrClaimRefused) && !errors.Is(err, model.ErrInvalid) {
			m.t.Fatalf("claim of %s on %s failed rather than being refused: %v", alloc, node, err)
		}
		return
	}
	m.held[alloc] = propClaim{node: node, mode: c.Mode}
}

func (m *fleetMachine) release() {
	if len(m.held) == 0 {
		return
	}
	alloc := rapid.SampledFrom(slices.Sorted(maps.Keys(m.held))).Draw(m.t, "alloc")
	_, err := m.admin.Release(context.Background(), "", "db", free(alloc))
	require.NoError(m.t, err)
	delete(m.held, alloc)
}

func (m *fleetMachine) down() {
	up := m.upNodes()
	if len(up) == 0 {
		return
	}
	for _, alloc := range slices.Sorted(maps.Keys(m.held)) {
		if c := m.held[alloc]; m.nodes[c.node] != nil && rapid.Bool().Draw(m.t, "a node with claims") {
			up = []string{c.node}
			break
		}
	}
	node := rapid.SampledFrom(up).Draw(m.t, "node")
	require.NoError(m.t, m.nodes[node].Close())
	delete(m.nodes, node)
	if _, ok := m.downAt[node]; !ok {
		m.downAt[node] = m.clock // down since; a flap between two GC steps is not seen
	}
}

func (m *fleetMachine) upOne() {
	down := m.downNodes()
	if len(down) == 0 {
		return
	}
	m.up(rapid.SampledFrom(down).Draw(m.t, "node"))
}

// step runs a GC step and checks what it frees against a model of GC:
// it notes a node down with claims at the first step that sees it so, and
// frees all its claims at the first step a grace period later.
func (m *fleetMachine) step() {
	m.clock = m.clock.Add(rapid.SampledFrom([]time.Duration{0, 30 * time.Second, propGrace}).Draw(m.t, "advance"))
	downWithClaims := map[string]bool{}
	for _, c := range m.held {
		if m.nodes[c.node] == nil {
			downWithClaims[c.node] = true
		}
	}
	for _, n := range propNodes {
		if m.nodes[n] != nil {
			delete(m.downAt, n)
		}
		if !downWithClaims[n] {
			delete(m.seenAt, n)
		}
	}
	var want []fleet.Freed
	for _, alloc := range slices.Sorted(maps.Keys(m.held)) {
		c := m.held[alloc]
		seen, ok := m.seenAt[c.node]
		if downWithClaims[c.node] && ok && m.clock.Sub(seen) >= propGrace {
			want = append(want, fleet.Freed{Namespace: "default", VolumeID: "db", AllocID: alloc, NodeID: c.node})
		}
	}
	for n := range downWithClaims {
		if _, ok := m.seenAt[n]; !ok {
			m.seenAt[n] = m.clock
		}
	}
	freed, err := m.gc.Step(context.Background(), m.clock)
	require.NoError(m.t, err)
	require.ElementsMatch(m.t, want, freed)
	for _, f := range freed {
		require.Nil(m.t, m.nodes[f.NodeID], "GC freed %s of node %s, which is up", f.AllocID, f.NodeID)
		require.GreaterOrEqual(m.t, m.clock.Sub(m.downAt[f.NodeID]), propGrace, "GC freed %s of node %s before the grace", f.AllocID, f.NodeID)
		delete(m.held, f.AllocID)
	}
}

func (m *fleetMachine) check() {
	v, err := m.admin.GetVolume(context.Background(), "", "db")
	require.NoError(m.t, err)
	got := map[string]propClaim{}
	nodes := map[string]bool{}
	for _, claims := range []map[string]*model.Claim{v.ReadClaims, v.WriteClaims} {
		for alloc, c := range claims {
			got[alloc] = propClaim{node: c.NodeID, mode: c.Mode}
			nodes[c.NodeID] = true
		}
	}
	require.Equal(m.t, m.held, got, "the claims in etcd are the ones granted and not released or freed")
	require.LessOrEqual(m.t, len(v.WriteClaims), m.mode.MaxWriters(), "writers under %s", m.mode)
	if m.mode.SingleNode() {
		require.LessOrEqual(m.t, len(nodes), 1, "claims on two nodes under %s", m.mode)
	}
}
