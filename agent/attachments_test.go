package agent_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/messages"
)

// TestAClusterAgentDetachesAVolumeFromADeadNode is the fleet's answer to
// a node that dies with a volume attached: the node's claim stays until
// the GC's grace is over, then the agent, whose node runs the plugin's
// controller, detaches the volume from the dead node with the plugin node
// ID the fleet recorded, and the fleet forgets the attachment, so the
// volume can be attached elsewhere.
func TestAClusterAgentDetachesAVolumeFromADeadNode(t *testing.T) {
	srv := etcdtest.StartProcess(t) // the agent's cluster member starts a protoactor remote
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	a, err := agent.Start(agent.Config{DataDir: dataDir(t), Logger: probe.Logger(t), NodeID: "n1",
		FingerprintInterval: 50 * time.Millisecond, ResyncInterval: time.Second,
		Cluster: &agent.ClusterConfig{Etcd: srv.Endpoints(), Address: "127.0.0.1:0", LeaseTTL: fleet.MinLeaseTTL,
			GCInterval: 100 * time.Millisecond, GCGrace: 2500 * time.Millisecond, FenceMargin: 400 * time.Millisecond}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Shutdown(context.Background())) })
	// The plugins' gRPC servers start after the agent's cluster member,
	// which sets gRPC's global logger (see member.Start).
	storage := filepath.Join(hostpathtest.TempDir(t), "storage") // one storage system for both nodes
	hostpathtest.Serve(t, hostpath.Config{Name: "hostpath", NodeID: "dead", Root: storage, Mode: hostpath.ModeNode, AttachRequired: true})
	plugin := hostpathtest.Serve(t, hostpath.Config{Name: "hostpath", NodeID: "n1", Root: storage, Mode: hostpath.ModeMonolith, AttachRequired: true})
	for _, ptype := range []string{csi.TypeController, csi.TypeNode} {
		require.NoError(t, a.Registry().RegisterPlugin(&messages.PluginInfo{Type: ptype, Name: "hp", AllocId: "a1",
			Connection: &messages.ConnectionInfo{SocketPath: plugin.Endpoint}}))
	}

	// The dead node, while alive, claimed the volume and attached it.
	c, err := csi.Dial(ctx, plugin.Endpoint, csi.Options{})
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	capability := &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	created, err := c.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "db", VolumeCapabilities: []*csipb.VolumeCapability{capability}})
	require.NoError(t, err)
	external := created.GetVolume().GetVolumeId()
	dead, err := fleet.Open(ctx, fleet.Config{Endpoints: srv.Endpoints(), NodeID: "dead", LeaseTTL: fleet.MinLeaseTTL})
	require.NoError(t, err)
	require.NoError(t, dead.PutFingerprints(ctx, []*messages.CSIFingerprint{
		{Type: csi.TypeNode, Name: "hp", AllocId: "hp-dead", Healthy: true, NodeInfo: &messages.CSINodeInfo{NodeId: "dead"}}}))
	v := model.NewCSIVolume("db", 0)
	v.PluginID, v.ExternalID = "hp", external
	v.AccessMode, v.AttachmentMode = model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem
	_, err = dead.RegisterVolume(ctx, v)
	require.NoError(t, err)
	_, err = dead.Claim(ctx, "", "db", &model.Claim{AllocID: "web-1", NodeID: "dead", Mode: model.ClaimModeWrite, State: model.ClaimStateTaken})
	require.NoError(t, err)
	_, err = dead.Attach(ctx, "", "db", &model.Attachment{NodeID: "dead", ExternalNodeID: "dead", State: model.AttachmentStateAttached})
	require.NoError(t, err)
	_, err = c.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: external, NodeId: "dead", VolumeCapability: capability})
	require.NoError(t, err)
	require.NoError(t, dead.Close()) // and died

	require.Eventually(t, func() bool {
		v, err := a.Catalog().GetVolume(ctx, "default", "db")
		return err == nil && len(v.Attachments) == 0 && len(v.WriteClaims) == 0
	}, 30*time.Second, 50*time.Millisecond, "GC frees the dead node's claim, then the agent detaches the volume from it")
	_, err = c.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: external, NodeId: "n1", VolumeCapability: capability})
	require.NoError(t, err, "the controller no longer holds the volume for the dead node")
	_, err = c.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: external, NodeId: "n1"})
	require.NoError(t, err)
}
