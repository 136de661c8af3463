package manager_test

import (
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"go.uber.org/mock/gomock"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/csitest"
	"github.com/plugvisor/plugvisor/csi/manager"
	"github.com/plugvisor/plugvisor/messages"
)

// oneFingerprint fingerprints once: the next one is a minute away.
var oneFingerprint = manager.FingerprintOptions{Interval: time.Minute, Retry: time.Minute, RPCTimeout: 2 * time.Second}

// answer is how a mock plugin answers one RPC.
type answer struct {
	rpc  string
	resp any
	err  error
}

// expecters maps each RPC's name to the function that makes m expect it.
func expecters(m *csitest.Mocks) map[string]func(ctx, req any) *gomock.Call {
	id, ctl, node := m.Identity.EXPECT(), m.Controller.EXPECT(), m.Node.EXPECT()
	return map[string]func(ctx, req any) *gomock.Call{
		"GetPluginInfo":             id.GetPluginInfo,
		"GetPluginCapabilities":     id.GetPluginCapabilities,
		"Probe":                     id.Probe,
		"ControllerGetCapabilities": ctl.ControllerGetCapabilities,
		"NodeGetInfo":               node.NodeGetInfo,
		"NodeGetCapabilities":       node.NodeGetCapabilities,
	}
}

// expectInOrder makes m expect exactly answers' RPCs, in that order, and
// answer them so.
func expectInOrder(m *csitest.Mocks, answers ...answer) {
	expect := expecters(m)
	calls := make([]any, 0, len(answers))
	for _, a := range answers {
		calls = append(calls, expect[a.rpc](gomock.Any(), gomock.Any()).Return(a.resp, a.err))
	}
	gomock.InOrder(calls...)
}

// The answers of a healthy node plugin, in the order a first fingerprint asks.
var (
	pluginInfoOK  = answer{"GetPluginInfo", &csipb.GetPluginInfoResponse{Name: "disk.csi.example.com", VendorVersion: "1.2.3"}, nil}
	pluginCapsOK  = answer{"GetPluginCapabilities", csitest.PluginCapabilities(nil, nil), nil}
	nodeInfoOK    = answer{"NodeGetInfo", &csipb.NodeGetInfoResponse{NodeId: "node-1"}, nil}
	probeOK       = answer{"Probe", &csipb.ProbeResponse{}, nil}
	nodeCapsOK    = answer{"NodeGetCapabilities", csitest.NodeCapabilities(), nil}
	controllerCap = answer{"ControllerGetCapabilities", csitest.ControllerCapabilities(), nil}
)

// failing is rpc answering with an error status.
func failing(rpc string, code codes.Code, msg string) answer {
	return answer{rpc, nil, status.Error(code, msg)}
}

// fingerprintOf builds the fingerprint expected of plugin "disk", alloc a1.
func fingerprintOf(ptype string, healthy bool, description string, change func(fp *messages.CSIFingerprint)) *messages.CSIFingerprint {
	fp := &messages.CSIFingerprint{Type: ptype, Name: "disk", AllocId: "a1", Healthy: healthy, HealthDescription: description}
	if change != nil {
		change(fp)
	}
	return fp
}

var (
	learnedInfo = &messages.CSIPluginInfo{Name: "disk.csi.example.com", VendorVersion: "1.2.3"}
	learnedNode = &messages.CSINodeInfo{NodeId: "node-1"}
)

func TestFingerprint(t *testing.T) {
	cases := []struct {
		name    string
		ptype   string
		answers []answer
		want    *messages.CSIFingerprint
	}{
		{
			name:    "a minimal node plugin is healthy",
			ptype:   csi.TypeNode,
			answers: []answer{pluginInfoOK, pluginCapsOK, nodeInfoOK, probeOK, nodeCapsOK},
			want: fingerprintOf(csi.TypeNode, true, csi.HealthyDescription, func(fp *messages.CSIFingerprint) {
				fp.PluginInfo, fp.NodeInfo, fp.Capabilities = learnedInfo, learnedNode, &messages.CSICapabilities{}
			}),
		},
		{
			name:  "a node plugin with capabilities, a volume limit and topology",
			ptype: csi.TypeNode,
			answers: []answer{
				{"GetPluginInfo", &csipb.GetPluginInfoResponse{Name: "disk.csi.example.com", VendorVersion: "1.2.3", Manifest: map[string]string{"commit": "abc"}}, nil},
				{"GetPluginCapabilities", csitest.PluginCapabilities(
					[]csipb.PluginCapability_Service_Type{csipb.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS, csipb.PluginCapability_Service_CONTROLLER_SERVICE},
					[]csipb.PluginCapability_VolumeExpansion_Type{csipb.PluginCapability_VolumeExpansion_ONLINE}), nil},
				{"NodeGetInfo", &csipb.NodeGetInfoResponse{NodeId: "node-1", MaxVolumesPerNode: 16,
					AccessibleTopology: &csipb.Topology{Segments: map[string]string{"zone": "z1", "rack": "r7"}}}, nil},
				{"Probe", &csipb.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil},
				{"NodeGetCapabilities", csitest.NodeCapabilities(csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS, csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME), nil},
			},
			want: fingerprintOf(csi.TypeNode, true, csi.HealthyDescription, func(fp *messages.CSIFingerprint) {
				fp.PluginInfo = &messages.CSIPluginInfo{Name: "disk.csi.example.com", VendorVersion: "1.2.3", Manifest: map[string]string{"commit": "abc"}}
				fp.NodeInfo = &messages.CSINodeInfo{NodeId: "node-1", MaxVolumes: 16, AccessibleTopology: map[string]string{"zone": "z1", "rack": "r7"}}
				fp.Capabilities = &messages.CSICapabilities{
					Plugin: []string{"CONTROLLER_SERVICE", "VOLUME_ACCESSIBILITY_CONSTRAINTS", "VOLUME_EXPANSION_ONLINE"},
					Node:   []string{"STAGE_UNSTAGE_VOLUME", "GET_VOLUME_STATS"},
				}
			}),
		},
		{
			name:  "a controller plugin with capabilities is asked no node RPC",
			ptype: csi.TypeController,
			answers: []answer{
				pluginInfoOK,
				{"GetPluginCapabilities", csitest.PluginCapabilities([]csipb.PluginCapability_Service_Type{csipb.PluginCapability_Service_CONTROLLER_SERVICE}, nil), nil},
				probeOK,
				{"ControllerGetCapabilities", csitest.ControllerCapabilities(csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME, csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME), nil},
			},
			want: fingerprintOf(csi.TypeController, true, csi.HealthyDescription, func(fp *messages.CSIFingerprint) {
				fp.PluginInfo = learnedInfo
				fp.Capabilities = &messages.CSICapabilities{Plugin: []string{"CONTROLLER_SERVICE"}, Controller: []string{"CREATE_DELETE_VOLUME", "PUBLISH_UNPUBLISH_VOLUME"}}
			}),
		},
		{
			name:  "capability values unknown to the spec are kept, not an error",
			ptype: csi.TypeNode,
			answers: []answer{
				pluginInfoOK,
				{"GetPluginCapabilities", csitest.PluginCapabilities(
					[]csipb.PluginCapability_Service_Type{99, csipb.PluginCapability_Service_CONTROLLER_SERVICE},
					[]csipb.PluginCapability_VolumeExpansion_Type{7}), nil},
				nodeInfoOK, probeOK,
				{"NodeGetCapabilities", csitest.NodeCapabilities(4, csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME), nil},
			},
			want: fingerprintOf(csi.TypeNode, true, csi.HealthyDescription, func(fp *messages.CSIFingerprint) {
				fp.PluginInfo, fp.NodeInfo = learnedInfo, learnedNode
				fp.Capabilities = &messages.CSICapabilities{Plugin: []string{"CONTROLLER_SERVICE"}, Node: []string{"STAGE_UNSTAGE_VOLUME", "VOLUME_CONDITION"}, Unknown: []int32{99, 7}}
			}),
		},
		{
			name:  "an unknown controller capability is kept too",
			ptype: csi.TypeController,
			answers: []answer{pluginInfoOK, pluginCapsOK, probeOK,
				{"ControllerGetCapabilities", csitest.ControllerCapabilities(11, 18), nil}},
			want: fingerprintOf(csi.TypeController, true, csi.HealthyDescription, func(fp *messages.CSIFingerprint) {
				fp.PluginInfo, fp.Capabilities = learnedInfo, &messages.CSICapabilities{Controller: []string{"VOLUME_CONDITION"}, Unknown: []int32{18}}
			}),
		},
		{
			name:  "GetPluginInfo failing makes the plugin unhealthy",
			ptype: csi.TypeNode,
			// The client sends a GetPluginInfo that fails UNAVAILABLE three
			// times in all (csi's retry policy) before it reports.
			answers: []answer{
				failing("GetPluginInfo", codes.Unavailable, "starting up"),
				failing("GetPluginInfo", codes.Unavailable, "starting up"),
				failing("GetPluginInfo", codes.Unavailable, "starting up"),
			},
			want: fingerprintOf(csi.TypeNode, false, "GetPluginInfo: unavailable: starting up", nil),
		},
		{
			name:    "GetPluginInfo answering without a name makes the plugin unhealthy",
			ptype:   csi.TypeNode,
			answers: []answer{{"GetPluginInfo", &csipb.GetPluginInfoResponse{VendorVersion: "1"}, nil}},
			want:    fingerprintOf(csi.TypeNode, false, "GetPluginInfo: invalid response: plugin name is empty", nil),
		},
		{
			name:    "GetPluginCapabilities failing makes the plugin unhealthy and keeps its info",
			ptype:   csi.TypeNode,
			answers: []answer{pluginInfoOK, failing("GetPluginCapabilities", codes.Internal, "oops")},
			want: fingerprintOf(csi.TypeNode, false, "GetPluginCapabilities: internal error: oops", func(fp *messages.CSIFingerprint) {
				fp.PluginInfo = learnedInfo
			}),
		},
		{
			name:    "NodeGetInfo failing makes the plugin unhealthy",
			ptype:   csi.TypeNode,
			answers: []answer{pluginInfoOK, pluginCapsOK, failing("NodeGetInfo", codes.FailedPrecondition, "no node")},
			want: fingerprintOf(csi.TypeNode, false, "NodeGetInfo: failed precondition: no node", func(fp *messages.CSIFingerprint) {
				fp.PluginInfo, fp.Capabilities = learnedInfo, &messages.CSICapabilities{}
			}),
		},
		{
			name:    "Probe failing makes the plugin unhealthy",
			ptype:   csi.TypeNode,
			answers: []answer{pluginInfoOK, pluginCapsOK, nodeInfoOK, failing("Probe", codes.FailedPrecondition, "disk gone")},
			want: fingerprintOf(csi.TypeNode, false, "Probe: failed precondition: disk gone", func(fp *messages.CSIFingerprint) {
				fp.PluginInfo, fp.NodeInfo, fp.Capabilities = learnedInfo, learnedNode, &messages.CSICapabilities{}
			}),
		},
		{
			name:    "Probe saying not ready makes the plugin unhealthy",
			ptype:   csi.TypeNode,
			answers: []answer{pluginInfoOK, pluginCapsOK, nodeInfoOK, {"Probe", &csipb.ProbeResponse{Ready: wrapperspb.Bool(false)}, nil}},
			want: fingerprintOf(csi.TypeNode, false, "Probe: plugin is not ready", func(fp *messages.CSIFingerprint) {
				fp.PluginInfo, fp.NodeInfo, fp.Capabilities = learnedInfo, learnedNode, &messages.CSICapabilities{}
			}),
		},
		{
			name:    "NodeGetCapabilities failing makes the plugin unhealthy",
			ptype:   csi.TypeNode,
			answers: []answer{pluginInfoOK, pluginCapsOK, nodeInfoOK, probeOK, failing("NodeGetCapabilities", codes.Unimplemented, "")},
			want: fingerprintOf(csi.TypeNode, false, "NodeGetCapabilities: unimplemented", func(fp *messages.CSIFingerprint) {
				fp.PluginInfo, fp.NodeInfo, fp.Capabilities = learnedInfo, learnedNode, &messages.CSICapabilities{}
			}),
		},
		{
			name:    "ControllerGetCapabilities failing makes the plugin unhealthy",
			ptype:   csi.TypeController,
			answers: []answer{pluginInfoOK, pluginCapsOK, probeOK, failing("ControllerGetCapabilities", codes.Unavailable, "leader election")},
			want: fingerprintOf(csi.TypeController, false, "ControllerGetCapabilities: unavailable: leader election", func(fp *messages.CSIFingerprint) {
				fp.PluginInfo, fp.Capabilities = learnedInfo, &messages.CSICapabilities{}
			}),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := csitest.NewMocks(t)
			socket := shortSocket(t)
			m.Serve(t, socket)
			expectInOrder(m, tc.answers...)
			u := startInstance(t, pluginAt(tc.ptype, "disk", "a1", socket), oneFingerprint, nil)
			got, final := u.next(t)
			require.False(t, final)
			want := proto.CloneOf(tc.want)
			want.SocketPath = socket // every fingerprint names its instance's socket
			require.True(t, proto.Equal(want, got), "want %v\n got %v", want, got)
			u.reports.ExpectNone(t, quiet)
		})
	}
}

func TestFingerprintRefusesASocketPathTooLongWithoutAnRPC(t *testing.T) {
	socket := "/tmp/" + strings.Repeat("x", 120) + "/csi.sock"
	u := startInstance(t, pluginAt(csi.TypeNode, "disk", "a1", socket), fastFingerprints, nil)
	got, _ := u.next(t)
	require.False(t, got.GetHealthy())
	require.Equal(t, `socket path too long: socket path "/tmp/`+strings.Repeat("x", 43)+`"… is 134 bytes, over the unix limit of 107; use a shorter directory`,
		got.GetHealthDescription(), "the description quotes a long path shortened")
	u.reports.ExpectNone(t, quiet)
}
