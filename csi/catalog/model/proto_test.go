package model

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/plugvisor/plugvisor/messages"
)

// throughTheWire encodes m and decodes it into a fresh T, as the store does.
func throughTheWire[T any, PT interface {
	*T
	proto.Message
}](t *testing.T, m PT) PT {
	t.Helper()
	b, err := proto.Marshal(m)
	require.NoError(t, err)
	out := PT(new(T))
	require.NoError(t, proto.Unmarshal(b, out))
	return out
}

func TestCatalogProtoRoundTripsAVolumeWithEverything(t *testing.T) {
	v := healthyVolume(AccessModeMultiNodeSingleWriter)
	v.Namespace = "prod"
	v.Topologies = []*Topology{{Segments: map[string]string{"zone": "a"}}, {Segments: map[string]string{"zone": "b", "rack": "7"}}}
	require.NoError(t, v.Claim(writeClaim("a1", "n1")))
	require.NoError(t, v.Claim(readClaim("a2", "n2")))
	stuck := moved(readClaim("a2", "n2"), ClaimStateNodeDetached)
	stuck.LastError = "ControllerUnpublishVolume: unavailable"
	require.NoError(t, v.ClaimRelease(stuck))
	v.ResourceExhausted = time.Date(2025, 3, 4, 5, 6, 7, 8, time.UTC)
	v.CreateIndex, v.ModifyIndex = 3, 9
	v.Health = Health{Schedulable: true, ControllerRequired: true, ControllersHealthy: 1, ControllersExpected: 2, NodesHealthy: 3, NodesExpected: 4}
	require.NoError(t, v.Attach(&Attachment{NodeID: "n1", ExternalNodeID: "i-1", State: AttachmentStateAttached}))
	require.NoError(t, v.Validate())

	back := VolumeFromProto(throughTheWire(t, v.Proto()))
	require.Equal(t, v, back)
	requireNoSharing(t, v, back)

	stub := VolumeStubFromProto(throughTheWire(t, v.StubProto()))
	require.Equal(t, v.Stub(), stub)
	require.Equal(t, 1, stub.CurrentReaders)
	require.Equal(t, 1, stub.CurrentWriters)
}

func TestCatalogProtoRoundTripsAPluginAndRecountsItsHealth(t *testing.T) {
	p := NewCSIPlugin("ebs", 2)
	require.NoError(t, p.AddPlugin("n1", fingerprint("a1", true, true, false)))
	require.NoError(t, p.AddPlugin("n1", fingerprint("a2", true, false, true)))
	require.NoError(t, p.AddPlugin("n2", fingerprint("a3", false, false, true)))
	require.NoError(t, p.SetJob(PluginJob{ID: "nodes", Type: PluginTypeNode, Expected: 2}))
	p.Nodes["n1"].UpdateTime = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	p.Nodes["n1"].NodeInfo.RequiresNodeStageVolume = true
	p.ModifyIndex = 7

	m := throughTheWire(t, p.Proto())
	require.Equal(t, int64(1), m.GetHealth().GetNodesHealthy())
	m.Health = &messages.CatalogHealth{NodesHealthy: 99, ControllersHealthy: -5} // ignored on decode
	back, err := PluginFromProto(m)
	require.NoError(t, err)
	require.Equal(t, p, back)
	requireNoSharing(t, p, back)
}

func TestCatalogPluginFromProtoRefusesWhatDoesNotFit(t *testing.T) {
	node := &messages.CatalogInstance{PluginId: "ebs", AllocId: "a1", NodeInfo: &messages.CatalogNodeInfo{NodeId: "i-1"}}
	tests := []struct {
		name   string
		plugin *messages.CatalogPlugin
	}{
		{"an empty plugin ID", &messages.CatalogPlugin{}},
		{"a controller entry without controller info", &messages.CatalogPlugin{Id: "ebs", Controllers: map[string]*messages.CatalogInstance{"n1": node}}},
		{"an instance of another plugin", &messages.CatalogPlugin{Id: "efs", Nodes: map[string]*messages.CatalogInstance{"n1": node}}},
		{"an instance without an alloc", &messages.CatalogPlugin{Id: "ebs", Nodes: map[string]*messages.CatalogInstance{
			"n1": {PluginId: "ebs", NodeInfo: &messages.CatalogNodeInfo{}}}}},
		{"a job filed under another ID", &messages.CatalogPlugin{Id: "ebs", Jobs: map[string]*messages.CatalogPluginJob{
			"j1": {Id: "j2", Type: "node", Expected: 1}}}},
		{"a job of an unknown type", &messages.CatalogPlugin{Id: "ebs", Jobs: map[string]*messages.CatalogPluginJob{
			"j1": {Id: "j1", Type: "sidecar", Expected: 1}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := PluginFromProto(tt.plugin)
			require.ErrorIs(t, err, ErrInvalidPlugin)
		})
	}
}

func TestCatalogInstanceFromFingerprint(t *testing.T) {
	when := time.Date(2025, 6, 7, 8, 9, 10, 0, time.UTC)
	caps := &messages.CSICapabilities{
		Plugin:     []string{"CONTROLLER_SERVICE", "VOLUME_ACCESSIBILITY_CONSTRAINTS"},
		Controller: []string{"CREATE_DELETE_VOLUME", "PUBLISH_UNPUBLISH_VOLUME", "MODIFY_VOLUME"},
		Node:       []string{"STAGE_UNSTAGE_VOLUME", "GET_VOLUME_STATS", "SINGLE_NODE_MULTI_WRITER"},
		Unknown:    []int32{11, 4},
	}
	base := func(ptype string) *messages.CSIFingerprint {
		return &messages.CSIFingerprint{
			Type: ptype, Name: "ebs", AllocId: "a1", Healthy: true, HealthDescription: "healthy",
			PluginInfo:   &messages.CSIPluginInfo{Name: "ebs.csi.aws.com", VendorVersion: "1.2.3"},
			Capabilities: caps,
			NodeInfo:     &messages.CSINodeInfo{NodeId: "i-1", MaxVolumes: 16, AccessibleTopology: map[string]string{"zone": "a"}},
			UpdateTime:   timestamppb.New(when),
		}
	}
	common := CSIInfo{
		PluginID: "ebs", AllocID: "a1", Healthy: true, HealthDescription: "healthy", UpdateTime: when,
		Provider: "ebs.csi.aws.com", ProviderVersion: "1.2.3", RequiresControllerPlugin: true, RequiresTopologies: true,
	}
	controller, node := common, common
	controller.ControllerInfo = &ControllerInfo{SupportsCreateDelete: true, SupportsAttachDetach: true, UnknownCapabilities: []int32{11, 4}}
	node.NodeInfo = &NodeInfo{
		NodeID: "i-1", MaxVolumes: 16, AccessibleTopology: &Topology{Segments: map[string]string{"zone": "a"}},
		RequiresNodeStageVolume: true, SupportsStats: true, UnknownCapabilities: []int32{11, 4},
	}
	replaced := func(fp *messages.CSIFingerprint) *messages.CSIFingerprint {
		fp.Healthy, fp.HealthDescription, fp.ReplacedBy = false, StoppedDescription, "a2"
		return fp
	}
	replacedNode := node
	replacedNode.Healthy, replacedNode.HealthDescription, replacedNode.ReplacedBy = false, StoppedDescription, "a2"
	tests := []struct {
		name string
		fp   *messages.CSIFingerprint
		want *CSIInfo
	}{
		{"a controller fingerprint gives controller info only", base("csi-controller"), &controller},
		{"a node fingerprint gives node info only", base("csi-node"), &node},
		{"a replaced instance's final fingerprint names its successor", replaced(base("csi-node")), &replacedNode},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := InstanceFromFingerprint(tt.fp)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.want, InstanceFromProto(throughTheWire(t, got.Proto())), "the stored form round-trips")
		})
	}

	bad := []struct {
		name string
		fp   *messages.CSIFingerprint
	}{
		{"no fingerprint", nil},
		{"a docker-volume fingerprint", &messages.CSIFingerprint{Type: "docker-volume", Name: "ebs", AllocId: "a1"}},
		{"a fingerprint without a plugin name", &messages.CSIFingerprint{Type: "csi-node", AllocId: "a1"}},
		{"a fingerprint without an alloc", &messages.CSIFingerprint{Type: "csi-node", Name: "ebs"}},
	}
	for _, tt := range bad {
		t.Run(tt.name+" is refused", func(t *testing.T) {
			_, err := InstanceFromFingerprint(tt.fp)
			require.ErrorIs(t, err, ErrInvalidPlugin)
		})
	}
}
