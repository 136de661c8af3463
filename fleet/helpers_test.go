package fleet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/messages"
)

// timeout bounds each step of a test on a loaded machine.
const timeout = 30 * time.Second

// testCtx is a context that ends with the test, or after timeout.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx
}

// open opens a Store of node on srv with a 2 s lease, closed with the test.
// Its requests have 10 s, twice the default: on a loaded machine etcd can
// take seconds to answer, and a test not about an outage must not see one.
func open(t testing.TB, srv *etcdtest.Server, node string, change ...func(*fleet.Config)) *fleet.Store {
	t.Helper()
	cfg := fleet.Config{Endpoints: srv.Endpoints(), NodeID: node, LeaseTTL: fleet.MinLeaseTTL, RequestTimeout: 10 * time.Second}
	for _, c := range change {
		c(&cfg)
	}
	s, err := fleet.Open(testCtx(t), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// steppedGC is a GC of s with a minute's grace that runs only when the
// test steps it.
func steppedGC(t testing.TB, s *fleet.Store) *fleet.GC {
	t.Helper()
	gc, err := fleet.StartGC(s, fleet.GCConfig{Grace: time.Minute})
	require.NoError(t, err)
	t.Cleanup(gc.Stop)
	return gc
}

// logTo has a store log to logs, for a test that asserts on its warnings.
func logTo(logs *probe.LogBuffer) func(*fleet.Config) {
	return func(c *fleet.Config) { c.Logger = hclog.New(&hclog.LoggerOptions{Output: logs}) }
}

// loggedNode starts an etcd and opens on it the store of "node-a", running
// plugin "ebs" healthy and logging to logs, for a test that asserts on its
// warnings; ctx is testCtx's.
func loggedNode(t testing.TB) (srv *etcdtest.Server, a *fleet.Store, logs *probe.LogBuffer, ctx context.Context) {
	t.Helper()
	srv, logs = etcdtest.Start(t), &probe.LogBuffer{}
	a = open(t, srv, "node-a", logTo(logs))
	healthyNode(t, a)
	return srv, a, logs, testCtx(t)
}

// volume is volume id of plugin "ebs" in the default namespace.
func volume(id string, mode model.AccessMode) *model.CSIVolume {
	v := model.NewCSIVolume(id, 0)
	v.Namespace = model.DefaultNamespace
	v.PluginID = "ebs"
	v.AccessMode = mode
	v.AttachmentMode = model.AttachmentModeFileSystem
	return v
}

func writeClaim(alloc, node string) *model.Claim {
	return &model.Claim{AllocID: alloc, NodeID: node, Mode: model.ClaimModeWrite, State: model.ClaimStateTaken}
}

func readClaim(alloc, node string) *model.Claim {
	return &model.Claim{AllocID: alloc, NodeID: node, Mode: model.ClaimModeRead, State: model.ClaimStateTaken}
}

func free(alloc string) *model.Claim {
	return &model.Claim{AllocID: alloc, State: model.ClaimStateReadyToFree}
}

// nodePlugin is the fingerprint of plugin's node service by alloc.
func nodePlugin(plugin, alloc string, healthy bool) *messages.CSIFingerprint {
	return &messages.CSIFingerprint{
		Type: "csi-node", Name: plugin, AllocId: alloc, Healthy: healthy,
		HealthDescription: fmt.Sprintf("healthy: %v", healthy),
		NodeInfo:          &messages.CSINodeInfo{NodeId: "csi-" + alloc},
	}
}

// healthyNode makes plugin "ebs" healthy on s's node.
func healthyNode(t testing.TB, s *fleet.Store) {
	t.Helper()
	require.NoError(t, s.PutFingerprints(testCtx(t), []*messages.CSIFingerprint{nodePlugin("ebs", "plugin-"+s.NodeID(), true)}))
}

// registered registers v through s.
func registered(t testing.TB, s *fleet.Store, v *model.CSIVolume) *model.CSIVolume {
	t.Helper()
	out, err := s.RegisterVolume(testCtx(t), v)
	require.NoError(t, err)
	return out
}

// controllerPlugin is the fingerprint of plugin's controller service by alloc.
func controllerPlugin(plugin, alloc string, healthy bool) *messages.CSIFingerprint {
	return &messages.CSIFingerprint{Type: "csi-controller", Name: plugin, AllocId: alloc, Healthy: healthy}
}

// healthyFleet starts an etcd and opens a Store on it for each of nodes,
// each running plugin "ebs" healthy.
func healthyFleet(t testing.TB, nodes ...string) (*etcdtest.Server, []*fleet.Store) {
	t.Helper()
	srv := etcdtest.Start(t)
	stores := make([]*fleet.Store, len(nodes))
	for i, node := range nodes {
		stores[i] = open(t, srv, node)
		healthyNode(t, stores[i])
	}
	return srv, stores
}

// twoHealthyNodes is healthyFleet of "node-a" and "node-b"; ctx is
// testCtx's.
func twoHealthyNodes(t testing.TB) (a, b *fleet.Store, ctx context.Context) {
	t.Helper()
	_, s := healthyFleet(t, "node-a", "node-b")
	return s[0], s[1], testCtx(t)
}

// fleetWithDB is healthyFleet with volume "db" of mode registered through
// the first node: where most tests of claims start.
func fleetWithDB(t *testing.T, mode model.AccessMode, nodes ...string) (*etcdtest.Server, []*fleet.Store) {
	t.Helper()
	srv, stores := healthyFleet(t, nodes...)
	registered(t, stores[0], volume("db", mode))
	return srv, stores
}

// twoWithDB is fleetWithDB of "node-a" and "node-b".
func twoWithDB(t *testing.T, mode model.AccessMode) (a, b *fleet.Store) {
	t.Helper()
	_, s := fleetWithDB(t, mode, "node-a", "node-b")
	return s[0], s[1]
}

// leavingNode opens node's store on srv with a 2 s lease. The test closes
// it itself: Close makes the node leave.
func leavingNode(t *testing.T, srv *etcdtest.Server, node string) *fleet.Store {
	t.Helper()
	s, err := fleet.Open(testCtx(t), fleet.Config{Endpoints: srv.Endpoints(), NodeID: node, LeaseTTL: fleet.MinLeaseTTL})
	require.NoError(t, err)
	return s
}

// leavingNodeWithDB opens "node-a" on srv as leavingNode does, running
// plugin "ebs" healthy, registers volume "db" of mode through it and claims
// it for "alloc-a" on node-a with claim (writeClaim or readClaim).
func leavingNodeWithDB(t *testing.T, srv *etcdtest.Server, mode model.AccessMode, claim func(alloc, node string) *model.Claim) *fleet.Store {
	t.Helper()
	a := leavingNode(t, srv, "node-a")
	healthyNode(t, a)
	registered(t, a, volume("db", mode))
	_, err := a.Claim(testCtx(t), "", "db", claim("alloc-a", "node-a"))
	require.NoError(t, err)
	return a
}
