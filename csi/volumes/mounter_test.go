package volumes_test

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"go.uber.org/mock/gomock"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/csitest"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
)

// volPlugin is the csi-node plugin the volume tests mount through.
const volPlugin = "ebs"

// volWait bounds every wait for an answer in the volume tests.
const volWait = 10 * time.Second

// Usages the volume tests mount with.
var (
	volWriter = csi.Usage{AttachmentMode: model.AttachmentModeFileSystem, AccessMode: model.AccessModeSingleNodeWriter}
	volReader = csi.Usage{ReadOnly: true, AttachmentMode: model.AttachmentModeFileSystem, AccessMode: model.AccessModeSingleNodeWriter}
)

// volFixture is a volume manager mounting through csi-test's gomock CSI
// servers, served on a real unix socket and registered as csi-node plugin
// volPlugin.
type volFixture struct {
	system  *actor.ActorSystem
	reg     *registry.Registry
	mocks   *csitest.Mocks
	root    string
	volumes *volumes.Volumes
	mounter *volumes.Mounter
}

func newVolFixture(t *testing.T) *volFixture {
	t.Helper()
	f := &volFixture{system: probe.NewSystem(t)}
	f.reg = volRegistry(t, f.system)
	f.mocks = csitest.NewMocks(t)
	socket := csitest.SocketPath(t)
	f.mocks.Serve(t, socket)
	volRegister(t, f.reg, socket)
	f.root = t.TempDir()
	f.volumes = volStart(t, f.system, f.reg, f.root)
	var err error
	f.mounter, err = f.volumes.MounterForPlugin(t.Context(), volPlugin)
	require.NoError(t, err)
	return f
}

// volRegistry starts a registry on an in-memory store.
func volRegistry(t *testing.T, system *actor.ActorSystem) *registry.Registry {
	t.Helper()
	bucket, err := storage.NewMemory().Bucket(registry.BucketName)
	require.NoError(t, err)
	reg, err := registry.New(system, registry.Config{Bucket: bucket, Logger: probe.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, reg.Shutdown()) })
	return reg
}

// volRegister registers the plugin at socket as volPlugin's current allocation.
func volRegister(t *testing.T, reg *registry.Registry, socket string) {
	t.Helper()
	require.NoError(t, reg.RegisterPlugin(&messages.PluginInfo{
		Type: volumes.NodePluginType, Name: volPlugin, AllocId: "plugin-alloc-1", Version: "1.0.0",
		Connection: &messages.ConnectionInfo{SocketPath: socket},
	}))
}

// volStart starts a volume manager with quick retries, shut down with the test.
func volStart(t *testing.T, system *actor.ActorSystem, reg *registry.Registry, root string) *volumes.Volumes {
	t.Helper()
	vm, err := volumes.StartVolumes(system, volumes.VolumesConfig{
		Registry:      reg,
		Root:          root,
		RPCTimeout:    volWait,
		DialTimeout:   volWait,
		RetryAttempts: 3,
		RetryBackoff:  time.Millisecond,
		Logger:        probe.Logger(t),
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, vm.Shutdown()) })
	return vm
}

func (f *volFixture) staging(vol string, u csi.Usage) string {
	return filepath.Join(f.root, volPlugin, volumes.StagingDirName, model.DefaultNamespace, vol, u.String())
}

func (f *volFixture) target(alloc, vol string, u csi.Usage) string {
	return filepath.Join(f.root, volPlugin, volumes.PerAllocDirName, alloc, vol, u.String())
}

// expectCaps expects one NodeGetCapabilities: the answer is cached per socket.
func (f *volFixture) expectCaps(stage bool) *gomock.Call {
	resp := &csipb.NodeGetCapabilitiesResponse{}
	if stage {
		resp.Capabilities = []*csipb.NodeServiceCapability{{Type: &csipb.NodeServiceCapability_Rpc{
			Rpc: &csipb.NodeServiceCapability_RPC{Type: csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME},
		}}}
	}
	return f.mocks.Node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).Return(resp, nil)
}

// volCapability is the CSI capability of a file-system usage without mount options.
func volCapability(u csi.Usage) *csipb.VolumeCapability {
	return volMountCapability(u, "")
}

func volMountCapability(u csi.Usage, fsType string, flags ...string) *csipb.VolumeCapability {
	mode := map[model.AccessMode]csipb.VolumeCapability_AccessMode_Mode{
		model.AccessModeSingleNodeReader:     csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		model.AccessModeSingleNodeWriter:     csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		model.AccessModeMultiNodeMultiWriter: csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER,
	}[u.AccessMode]
	c := &csipb.VolumeCapability{AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode}}
	if u.AttachmentMode == model.AttachmentModeBlockDevice {
		c.AccessType = &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}
	} else {
		c.AccessType = &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: fsType, MountFlags: flags}}
	}
	return c
}

// expectStage expects NodeStageVolume of vol for u with capability c.
func (f *volFixture) expectStage(vol string, u csi.Usage, c *csipb.VolumeCapability) *gomock.Call {
	return f.mocks.Node.EXPECT().NodeStageVolume(gomock.Any(), csitest.ProtoEq(&csipb.NodeStageVolumeRequest{
		VolumeId: vol, StagingTargetPath: f.staging(vol, u), VolumeCapability: c,
	})).Return(&csipb.NodeStageVolumeResponse{}, nil)
}

// expectPublish expects NodePublishVolume of vol for alloc, staged when staged is set.
func (f *volFixture) expectPublish(alloc, vol string, u csi.Usage, c *csipb.VolumeCapability, staged bool) *gomock.Call {
	req := &csipb.NodePublishVolumeRequest{
		VolumeId: vol, TargetPath: f.target(alloc, vol, u), VolumeCapability: c, Readonly: u.ReadOnly,
	}
	if staged {
		req.StagingTargetPath = f.staging(vol, u)
	}
	return f.mocks.Node.EXPECT().NodePublishVolume(gomock.Any(), csitest.ProtoEq(req)).Return(&csipb.NodePublishVolumeResponse{}, nil)
}

func (f *volFixture) expectUnpublish(alloc, vol string, u csi.Usage) *gomock.Call {
	return f.mocks.Node.EXPECT().NodeUnpublishVolume(gomock.Any(), csitest.ProtoEq(&csipb.NodeUnpublishVolumeRequest{
		VolumeId: vol, TargetPath: f.target(alloc, vol, u),
	})).Return(&csipb.NodeUnpublishVolumeResponse{}, nil)
}

func (f *volFixture) expectUnstage(vol string, u csi.Usage) *gomock.Call {
	return f.mocks.Node.EXPECT().NodeUnstageVolume(gomock.Any(), csitest.ProtoEq(&csipb.NodeUnstageVolumeRequest{
		VolumeId: vol, StagingTargetPath: f.staging(vol, u),
	})).Return(&csipb.NodeUnstageVolumeResponse{}, nil)
}

// expectFirstMount expects, in order, what the first mount on the plugin
// sends for vol and alloc: NodeGetCapabilities, the staging, the publishing.
func (f *volFixture) expectFirstMount(alloc, vol string, u csi.Usage) []any {
	c := volCapability(u)
	return []any{f.expectCaps(true), f.expectStage(vol, u, c), f.expectPublish(alloc, vol, u, c, true)}
}

// expectLastUnmount expects, in order, the unpublishing of vol from alloc
// and the unstaging that the last unmount of the usage sends.
func (f *volFixture) expectLastUnmount(alloc, vol string, u csi.Usage) []any {
	return []any{f.expectUnpublish(alloc, vol, u), f.expectUnstage(vol, u)}
}

// volMount is a request to mount vol for alloc with usage u.
func volMount(vol, alloc string, u csi.Usage) volumes.MountRequest {
	return volumes.MountRequest{
		Volume: volumes.VolumeSpec{ID: vol}, AllocID: alloc,
		AccessMode: u.AccessMode, AttachmentMode: u.AttachmentMode, ReadOnly: u.ReadOnly,
	}
}

func (f *volFixture) mount(t *testing.T, vol, alloc string, u csi.Usage) (volumes.MountResult, error) {
	t.Helper()
	return f.mounter.MountVolume(t.Context(), volMount(vol, alloc, u))
}

func (f *volFixture) unmount(t *testing.T, vol, alloc string) error {
	t.Helper()
	return f.mounter.UnmountVolume(t.Context(), volumes.UnmountRequest{VolumeID: vol, AllocID: alloc})
}

// send sends an actor caller's mount (with p as sender) without waiting.
func (f *volFixture) send(p *probe.Probe, vol, alloc string, u csi.Usage) {
	p.Send(f.volumes.PID(), volMount(vol, alloc, u).Message(volPlugin))
}

// expectMounted expects p's next message to be a successful MountVolumeResponse.
func expectMounted(t *testing.T, p *probe.Probe) *messages.MountVolumeResponse {
	t.Helper()
	resp := probe.Expect[*messages.MountVolumeResponse](t, p, volWait)
	require.NoError(t, volumes.VolumeErrorFromProto(resp.GetError()))
	return resp
}

func TestMountVolumeSendsStagePublishUnpublishUnstageInOrder(t *testing.T) {
	blockReader := csi.Usage{ReadOnly: true, AttachmentMode: model.AttachmentModeBlockDevice, AccessMode: model.AccessModeSingleNodeReader}
	cases := []struct {
		name       string
		usage      csi.Usage
		options    *volumes.MountOptions
		contexts   map[string]string // the volume context and the publish context
		capability *csipb.VolumeCapability
		segment    string
	}{
		{"read-write file system with mount options and contexts", volWriter,
			&volumes.MountOptions{FSType: "ext4", MountFlags: []string{"noatime"}}, map[string]string{"device": "/dev/vdb"},
			volMountCapability(volWriter, "ext4", "noatime"), "rw-file-system-single-node-writer"},
		{"read-only block device", blockReader, nil, nil,
			volCapability(blockReader), "ro-block-device-single-node-reader-only"},
		{"reader of a multi-node multi-writer volume", volReaderMulti(), nil, nil,
			volCapability(volReaderMulti()), "ro-file-system-multi-node-multi-writer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newVolFixture(t)
			req := volMount("vol-1", "alloc-1", tc.usage)
			req.Volume.Namespace, req.Volume.MountOptions = "prod", tc.options
			req.Volume.Context, req.PublishContext = tc.contexts, tc.contexts
			staging := filepath.Join(f.root, "ebs", "staging", "prod", "vol-1", tc.segment)
			target := filepath.Join(f.root, "ebs", "per-alloc", "alloc-1", "vol-1", tc.segment)
			gomock.InOrder(
				f.expectCaps(true),
				f.mocks.Node.EXPECT().NodeStageVolume(gomock.Any(), csitest.ProtoEq(&csipb.NodeStageVolumeRequest{
					VolumeId: "vol-1", PublishContext: tc.contexts, StagingTargetPath: staging,
					VolumeCapability: tc.capability, VolumeContext: tc.contexts,
				})).Return(&csipb.NodeStageVolumeResponse{}, nil),
				f.mocks.Node.EXPECT().NodePublishVolume(gomock.Any(), csitest.ProtoEq(&csipb.NodePublishVolumeRequest{
					VolumeId: "vol-1", PublishContext: tc.contexts, StagingTargetPath: staging,
					TargetPath: target, VolumeCapability: tc.capability, Readonly: tc.usage.ReadOnly,
					VolumeContext: tc.contexts,
				})).Return(&csipb.NodePublishVolumeResponse{}, nil),
				f.mocks.Node.EXPECT().NodeUnpublishVolume(gomock.Any(), csitest.ProtoEq(&csipb.NodeUnpublishVolumeRequest{
					VolumeId: "vol-1", TargetPath: target,
				})).Return(&csipb.NodeUnpublishVolumeResponse{}, nil),
				f.mocks.Node.EXPECT().NodeUnstageVolume(gomock.Any(), csitest.ProtoEq(&csipb.NodeUnstageVolumeRequest{
					VolumeId: "vol-1", StagingTargetPath: staging,
				})).Return(&csipb.NodeUnstageVolumeResponse{}, nil),
			)

			res, err := f.mounter.MountVolume(t.Context(), req)
			require.NoError(t, err)
			require.Equal(t, volumes.MountResult{
				TargetPath: target, StagingPath: staging,
				IsDevice: tc.usage.AttachmentMode == model.AttachmentModeBlockDevice,
			}, res)
			require.DirExists(t, staging, "the staging path is made before staging")
			require.DirExists(t, filepath.Dir(target), "the target's parent is made; the plugin makes the target")

			require.NoError(t, f.mounter.UnmountVolume(t.Context(), volumes.UnmountRequest{Namespace: "prod", VolumeID: "vol-1", AllocID: "alloc-1"}))
			require.NoDirExists(t, filepath.Join(f.root, "ebs", "per-alloc", "alloc-1"), "empty alloc directories are removed")
			require.NoDirExists(t, filepath.Join(f.root, "ebs", "staging", "prod"), "empty staging directories are removed")
		})
	}
}

func TestMountVolumeWithoutStageCapabilityOnlyPublishes(t *testing.T) {
	f := newVolFixture(t)
	gomock.InOrder(
		f.expectCaps(false),
		f.expectPublish("a1", "v1", volWriter, volCapability(volWriter), false),
		f.expectPublish("a2", "v1", volReader, volCapability(volReader), false),
		f.expectUnpublish("a1", "v1", volWriter),
		f.expectUnpublish("a2", "v1", volReader),
	)
	res, err := f.mount(t, "v1", "a1", volWriter)
	require.NoError(t, err)
	require.Empty(t, res.StagingPath, "nothing is staged")
	_, err = f.mount(t, "v1", "a2", volReader)
	require.NoError(t, err)
	require.NoError(t, f.unmount(t, "v1", "a1"))
	require.NoError(t, f.unmount(t, "v1", "a2"))
	require.NoDirExists(t, filepath.Join(f.root, volPlugin, volumes.StagingDirName))
}

func TestMountVolumeRefusesBadRequestsWithoutAnyRPC(t *testing.T) {
	cases := []struct {
		name   string
		change func(r *volumes.MountRequest)
		want   string
	}{
		{"namespace climbing out", func(r *volumes.MountRequest) { r.Volume.Namespace = "../../etc" },
			`namespace "../../etc" must not contain a path separator`},
		{"volume ID climbing out", func(r *volumes.MountRequest) { r.Volume.ID = ".." },
			`volume ID ".." must not contain ".."`},
		{"alloc ID climbing out", func(r *volumes.MountRequest) { r.AllocID = "../a1" },
			`alloc ID "../a1" must not contain a path separator`},
		{"unknown access mode", func(r *volumes.MountRequest) { r.AccessMode = "single-node-single-writer" },
			`unknown access mode "single-node-single-writer"`},
		{"unknown attachment mode", func(r *volumes.MountRequest) { r.AttachmentMode = "fs" },
			`unknown attachment mode "fs"`},
		{"read-write on a reader-only mode", func(r *volumes.MountRequest) { r.AccessMode = model.AccessModeSingleNodeReader },
			"access mode single-node-reader-only is read-only: a mount with it must be read-only"},
		{"block device with an fs type", func(r *volumes.MountRequest) {
			r.AttachmentMode = model.AttachmentModeBlockDevice
			r.MountOptions = &volumes.MountOptions{FSType: "ext4"}
		}, `attachment mode block-device takes no fs_type (got "ext4")`},
		{"empty mount flag", func(r *volumes.MountRequest) { r.MountOptions = &volumes.MountOptions{MountFlags: []string{""}} },
			"mount flag 1 is empty"},
		{"mount flag with traversal", func(r *volumes.MountRequest) {
			r.Volume.MountOptions = &volumes.MountOptions{MountFlags: []string{"lowerdir=/x/../../etc"}}
		}, `mount flag "lowerdir=/x/../../etc" must not contain ".."`},
	}
	f := newVolFixture(t) // no expectations: any RPC fails the test
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := volMount("v1", "a1", volWriter)
			tc.change(&req)
			_, err := f.mounter.MountVolume(t.Context(), req)
			require.ErrorIs(t, err, csi.ErrInvalidVolumeRequest)
			require.ErrorContains(t, err, "csi: invalid volume request: ")
			require.ErrorContains(t, err, tc.want)
		})
	}
	t.Run("unmount with traversal", func(t *testing.T) {
		err := f.mounter.UnmountVolume(t.Context(), volumes.UnmountRequest{Namespace: "..", VolumeID: "v1/x", AllocID: "a1"})
		require.ErrorIs(t, err, csi.ErrInvalidVolumeRequest)
		require.ErrorContains(t, err, `namespace ".." must not contain ".."`)
		require.ErrorContains(t, err, `volume ID "v1/x" must not contain a path separator`)
	})
	t.Run("actor caller naming an unknown plugin", func(t *testing.T) {
		p := probe.New(t, f.system)
		msg := volMount("v1", "a1", volWriter).Message("no-such-plugin")
		resp := probe.Ask[*messages.MountVolumeResponse](t, p, f.volumes.PID(), msg, volWait)
		err := volumes.VolumeErrorFromProto(resp.GetError())
		require.ErrorIs(t, err, volumes.ErrPluginNotFound)
		require.ErrorContains(t, err, `no csi-node plugin "no-such-plugin" is registered`)
	})
	entries, err := os.ReadDir(f.root)
	require.NoError(t, err)
	require.Empty(t, entries, "refused requests create no directories")
}

func TestMounterForPlugin(t *testing.T) {
	f := newVolFixture(t)
	require.Equal(t, volPlugin, f.mounter.Plugin())
	_, err := f.volumes.MounterForPlugin(t.Context(), "no-such-plugin")
	require.ErrorIs(t, err, volumes.ErrPluginNotFound)
	_, err = f.volumes.MounterForPlugin(t.Context(), "../ebs")
	require.ErrorIs(t, err, csi.ErrInvalidVolumeRequest)
}

func TestMergeMountOptions(t *testing.T) {
	volume := &volumes.MountOptions{FSType: "ext4", MountFlags: []string{"noatime", "discard"}}
	cases := []struct {
		name            string
		volume, request *volumes.MountOptions
		want            *volumes.MountOptions
	}{
		{"neither has options", nil, nil, nil},
		{"the volume's options", volume, nil, volume},
		{"the request's options", nil, &volumes.MountOptions{FSType: "xfs"}, &volumes.MountOptions{FSType: "xfs"}},
		{"the request overrides the fs type only", volume, &volumes.MountOptions{FSType: "xfs"},
			&volumes.MountOptions{FSType: "xfs", MountFlags: []string{"noatime", "discard"}}},
		{"the request overrides the flags only", volume, &volumes.MountOptions{MountFlags: []string{"ro"}},
			&volumes.MountOptions{FSType: "ext4", MountFlags: []string{"ro"}}},
		{"empty request flags clear the volume's", volume, &volumes.MountOptions{MountFlags: []string{}},
			&volumes.MountOptions{FSType: "ext4", MountFlags: []string{}}},
		{"an empty request changes nothing", volume, &volumes.MountOptions{}, volume},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := volumes.MergeMountOptions(tc.volume, tc.request)
			require.Equal(t, tc.want, got)
			if got != nil && len(got.MountFlags) > 0 {
				got.MountFlags[0] = "changed"
				require.Equal(t, "noatime", volume.MountFlags[0], "the result shares no slice with its inputs")
			}
		})
	}
}

func TestMountVolumeSendsTheMergedMountOptions(t *testing.T) {
	cases := []struct {
		name            string
		volume, request *volumes.MountOptions
		fsType          string
		flags           []string
	}{
		{"from the volume", &volumes.MountOptions{FSType: "ext4", MountFlags: []string{"noatime"}}, nil, "ext4", []string{"noatime"}},
		{"fs type overridden by the request", &volumes.MountOptions{FSType: "ext4", MountFlags: []string{"noatime"}},
			&volumes.MountOptions{FSType: "xfs"}, "xfs", []string{"noatime"}},
		{"flags overridden by the request", &volumes.MountOptions{FSType: "ext4", MountFlags: []string{"noatime"}},
			&volumes.MountOptions{MountFlags: []string{"nodev", "nosuid"}}, "ext4", []string{"nodev", "nosuid"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newVolFixture(t)
			c := volMountCapability(volWriter, tc.fsType, tc.flags...)
			gomock.InOrder(f.expectCaps(true), f.expectStage("v1", volWriter, c), f.expectPublish("a1", "v1", volWriter, c, true))
			req := volMount("v1", "a1", volWriter)
			req.Volume.MountOptions, req.MountOptions = tc.volume, tc.request
			_, err := f.mounter.MountVolume(t.Context(), req)
			require.NoError(t, err)
		})
	}
}

func TestSecondWriterOnASingleNodeWriterVolumeIsRefused(t *testing.T) {
	f := newVolFixture(t)
	rw, ro := volCapability(volWriter), volCapability(volReader)
	calls := f.expectFirstMount("a1", "v1", volWriter)
	calls = append(calls,
		// a2's write claim is refused before any RPC; a3 may read.
		f.expectStage("v1", volReader, ro),
		f.expectPublish("a3", "v1", volReader, ro, true))
	calls = append(calls, f.expectLastUnmount("a1", "v1", volWriter)...)
	calls = append(calls,
		// With a1 gone, a2 may write.
		f.expectStage("v1", volWriter, rw),
		f.expectPublish("a2", "v1", volWriter, rw, true))
	gomock.InOrder(calls...)
	_, err := f.mount(t, "v1", "a1", volWriter)
	require.NoError(t, err)

	_, err = f.mount(t, "v1", "a2", volWriter)
	require.ErrorIs(t, err, csi.ErrClaimRefused)
	require.ErrorContains(t, err, `volume "v1" (single-node-writer) already has a writer (alloc a1)`)
	require.NoDirExists(t, filepath.Join(f.root, volPlugin, volumes.PerAllocDirName, "a2"), "a refused claim changes nothing")

	_, err = f.mount(t, "v1", "a3", volReader)
	require.NoError(t, err, "a reader may join a single-node-writer volume")

	require.NoError(t, f.unmount(t, "v1", "a1"))
	_, err = f.mount(t, "v1", "a2", volWriter)
	require.NoError(t, err, "the writer's claim was released with its unmount")
}

func TestMountVolumeAgainForTheSameAlloc(t *testing.T) {
	f := newVolFixture(t)
	gomock.InOrder(f.expectFirstMount("a1", "v1", volWriter)...)
	first, err := f.mount(t, "v1", "a1", volWriter)
	require.NoError(t, err)
	again, err := f.mount(t, "v1", "a1", volWriter)
	require.NoError(t, err, "mounting again the same way sends no RPC")
	require.Equal(t, first, again)

	_, err = f.mount(t, "v1", "a1", volReader)
	require.ErrorIs(t, err, csi.ErrClaimRefused)
	require.ErrorContains(t, err, "alloc a1 already mounts volume \"v1\" as rw-file-system-single-node-writer")
}

func TestUnmountOfAVolumeNotMountedChangesNothing(t *testing.T) {
	f := newVolFixture(t)
	err := f.unmount(t, "v1", "a1")
	require.ErrorIs(t, err, volumes.ErrNotMounted)
	require.ErrorContains(t, err, `csi: volume not mounted: alloc a1 does not mount volume "v1" in namespace "default" of plugin "ebs"`)
}

func TestConcurrentMountsOfOneVolumeStageOnce(t *testing.T) {
	f := newVolFixture(t)
	mm := volReaderMulti()
	caps := f.expectCaps(true)
	stage := f.expectStage("v1", mm, volCapability(mm)).After(caps)
	pubA := f.expectPublish("a1", "v1", mm, volCapability(mm), true).After(stage)
	pubB := f.expectPublish("a2", "v1", mm, volCapability(mm), true).After(stage)
	unpubA := f.expectUnpublish("a1", "v1", mm).After(pubA).After(pubB)
	unpubB := f.expectUnpublish("a2", "v1", mm).After(unpubA)
	f.expectUnstage("v1", mm).After(unpubB)

	pA, pB := probe.New(t, f.system), probe.New(t, f.system)
	f.send(pA, "v1", "a1", mm)
	f.send(pB, "v1", "a2", mm)
	a, b := expectMounted(t, pA), expectMounted(t, pB)
	require.Equal(t, f.staging("v1", mm), a.GetStagingPath())
	require.Equal(t, a.GetStagingPath(), b.GetStagingPath(), "both use the one staging")

	require.NoError(t, f.unmount(t, "v1", "a1"), "a2 still uses the staging: no unstage")
	require.DirExists(t, f.staging("v1", mm))
	require.NoError(t, f.unmount(t, "v1", "a2"), "the last unmount unstages")
}

// volReaderMulti is a read-only usage of a multi-node multi-writer volume,
// which many allocs may share.
func volReaderMulti() csi.Usage {
	return csi.Usage{ReadOnly: true, AttachmentMode: model.AttachmentModeFileSystem, AccessMode: model.AccessModeMultiNodeMultiWriter}
}

// TestUnmountRacingAMountNeverUnstagesUnderIt is Nomad issue 20424: an
// unmount of the last alloc and a mount of a new one, sent back to back,
// run one after the other, so the staging the new mount uses is its own.
func TestUnmountRacingAMountNeverUnstagesUnderIt(t *testing.T) {
	f := newVolFixture(t)
	c := volCapability(volWriter)
	calls := append(f.expectFirstMount("a1", "v1", volWriter), f.expectLastUnmount("a1", "v1", volWriter)...)
	calls = append(calls, f.expectStage("v1", volWriter, c), f.expectPublish("a2", "v1", volWriter, c, true))
	gomock.InOrder(append(calls, f.expectLastUnmount("a2", "v1", volWriter)...)...)
	_, err := f.mount(t, "v1", "a1", volWriter)
	require.NoError(t, err)

	p := probe.New(t, f.system)
	p.Send(f.volumes.PID(), &messages.UnmountVolume{Plugin: volPlugin, VolumeId: "v1", AllocId: "a1"})
	f.send(p, "v1", "a2", volWriter)
	unmounted := probe.Expect[*messages.UnmountVolumeResponse](t, p, volWait)
	require.NoError(t, volumes.VolumeErrorFromProto(unmounted.GetError()))
	expectMounted(t, p)
	require.DirExists(t, f.staging("v1", volWriter), "a2's staging is in place")

	require.NoError(t, f.unmount(t, "v1", "a2"))
}

func TestOperationsOnOneVolumeAreSerializedAndOthersProceed(t *testing.T) {
	f := newVolFixture(t)
	c := volCapability(volReaderMulti())
	mm := volReaderMulti()
	entered, release := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	a2Published := make(chan struct{}, 1)

	f.mocks.Node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).Return(&csipb.NodeGetCapabilitiesResponse{}, nil).MinTimes(1)
	pubA1 := f.mocks.Node.EXPECT().NodePublishVolume(gomock.Any(), csitest.ProtoEq(&csipb.NodePublishVolumeRequest{
		VolumeId: "v1", TargetPath: f.target("a1", "v1", mm), VolumeCapability: c, Readonly: true,
	})).DoAndReturn(func(ctx context.Context, _ *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
		close(entered)
		select {
		case <-release:
			return &csipb.NodePublishVolumeResponse{}, nil
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	})
	f.expectPublish("a3", "v2", mm, c, false)
	f.expectPublish("a2", "v1", mm, c, false).After(pubA1).Do(func(context.Context, *csipb.NodePublishVolumeRequest) {
		a2Published <- struct{}{}
	})

	pA, pB, pC := probe.New(t, f.system), probe.New(t, f.system), probe.New(t, f.system)
	f.send(pA, "v1", "a1", mm)
	select {
	case <-entered:
	case <-time.After(volWait):
		t.Fatal("a1's NodePublishVolume never arrived")
	}
	f.send(pB, "v1", "a2", mm)
	f.send(pC, "v2", "a3", mm)

	expectMounted(t, pC) // another volume proceeds while v1 is busy
	pB.ExpectNone(t, 100*time.Millisecond)
	require.Empty(t, a2Published, "a2's mount waits for a1's")

	close(release)
	expectMounted(t, pA)
	expectMounted(t, pB)
	require.Len(t, a2Published, 1)
}

func TestVolumeRPCsAreRetriedAndFailuresRollBack(t *testing.T) {
	f := newVolFixture(t)
	c := volCapability(volWriter)
	unavailable := status.Error(codes.Unavailable, "plugin restarting")
	stageReq := csitest.ProtoEq(&csipb.NodeStageVolumeRequest{VolumeId: "v1", StagingTargetPath: f.staging("v1", volWriter), VolumeCapability: c})
	gomock.InOrder(
		f.expectCaps(true),
		// a1: staging is retried twice, publishing fails for good, and the staging is undone.
		f.mocks.Node.EXPECT().NodeStageVolume(gomock.Any(), stageReq).Return(nil, unavailable).Times(2),
		f.expectStage("v1", volWriter, c),
		f.mocks.Node.EXPECT().NodePublishVolume(gomock.Any(), gomock.Any()).
			Return(nil, status.Error(codes.InvalidArgument, "bad target")),
		f.expectUnstage("v1", volWriter),
		// a2: the claim a1 held is free again; staging gives up after 3 attempts.
		f.mocks.Node.EXPECT().NodeStageVolume(gomock.Any(), stageReq).Return(nil, unavailable).Times(3),
	)
	_, err := f.mount(t, "v1", "a1", volWriter)
	require.ErrorContains(t, err, `csi: mount volume "v1" in namespace "default" for alloc a1 on plugin "ebs": csi: NodePublishVolume: invalid argument: bad target`)
	require.NoDirExists(t, filepath.Join(f.root, volPlugin, volumes.PerAllocDirName, "a1"), "a failed mount leaves no directories")
	require.NoDirExists(t, filepath.Join(f.root, volPlugin, volumes.StagingDirName, model.DefaultNamespace))

	_, err = f.mount(t, "v1", "a2", volWriter)
	require.ErrorContains(t, err, "csi: gave up after 3 attempts: csi: NodeStageVolume: unavailable: plugin restarting")
	require.NotErrorIs(t, err, csi.ErrClaimRefused, "a1's claim was released when its mount failed")

	err = f.unmount(t, "v1", "a2")
	require.ErrorIs(t, err, volumes.ErrNotMounted, "a failed mount is not mounted")
}

func TestFailedUnmountResumesWhereItStopped(t *testing.T) {
	f := newVolFixture(t)
	gomock.InOrder(append(f.expectFirstMount("a1", "v1", volWriter),
		f.expectUnpublish("a1", "v1", volWriter),
		f.mocks.Node.EXPECT().NodeUnstageVolume(gomock.Any(), gomock.Any()).Return(nil, status.Error(codes.Internal, "device busy")),
		// The retry unstages without unpublishing again.
		f.expectUnstage("v1", volWriter),
	)...)
	_, err := f.mount(t, "v1", "a1", volWriter)
	require.NoError(t, err)

	err = f.unmount(t, "v1", "a1")
	require.ErrorContains(t, err, "csi: NodeUnstageVolume: internal error: device busy")

	_, err = f.mount(t, "v1", "a1", volWriter)
	require.ErrorIs(t, err, csi.ErrClaimRefused, "the alloc must finish its unmount first")
	require.ErrorContains(t, err, "unfinished unmount")

	require.NoError(t, f.unmount(t, "v1", "a1"))
	require.ErrorIs(t, f.unmount(t, "v1", "a1"), volumes.ErrNotMounted, "the unmount finished")
}

func TestVolumesShutdownAnswersEveryCallerAndRefusesLaterCalls(t *testing.T) {
	f := newVolFixture(t)
	entered := make(chan struct{})
	f.expectCaps(false)
	f.mocks.Node.EXPECT().NodePublishVolume(gomock.Any(), gomock.Any()).
		DoAndReturn(func(ctx context.Context, _ *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
			close(entered)
			<-ctx.Done() // until the volume manager cancels it
			return nil, status.FromContextError(ctx.Err()).Err()
		})
	running := make(chan error, 1)
	go func() {
		_, err := f.mount(t, "v1", "a1", volWriter)
		running <- err
	}()
	pB := probe.New(t, f.system)
	select {
	case <-entered:
	case <-time.After(volWait):
		t.Fatal("a1's NodePublishVolume never arrived")
	}
	f.send(pB, "v1", "a2", volWriter) // queued behind a1

	require.NoError(t, f.volumes.Shutdown(), "shutdown does not wait behind a Go caller's mount")
	require.ErrorContains(t, <-running, "csi: NodePublishVolume: canceled")
	queued := volumes.VolumeErrorFromProto(probe.Expect[*messages.MountVolumeResponse](t, pB, volWait).GetError())
	require.ErrorIs(t, queued, volumes.ErrVolumesShutDown)

	_, err := f.mount(t, "v1", "a3", volWriter)
	require.ErrorIs(t, err, volumes.ErrVolumesShutDown)
	_, err = f.volumes.MounterForPlugin(t.Context(), volPlugin)
	require.ErrorIs(t, err, volumes.ErrVolumesShutDown)
	require.NoError(t, f.volumes.Shutdown(), "a second shutdown does nothing")
}

func TestLocalClaimerAppliesTheCatalogClaimRules(t *testing.T) {
	claim := func(alloc string, u csi.Usage) csi.ClaimRequest {
		return csi.ClaimRequest{Plugin: volPlugin, Namespace: "default", VolumeID: "v1", AllocID: alloc, Usage: u}
	}
	readerOnly := csi.Usage{ReadOnly: true, AttachmentMode: model.AttachmentModeFileSystem, AccessMode: model.AccessModeSingleNodeReader}
	writeOnReaderOnly := readerOnly
	writeOnReaderOnly.ReadOnly = false
	type step struct {
		release bool
		req     csi.ClaimRequest
		want    error // nil, or a sentinel besides ErrClaimRefused
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"one writer", []step{{req: claim("a1", volWriter)}}},
		{"a second writer is refused", []step{
			{req: claim("a1", volWriter)}, {req: claim("a2", volWriter), want: model.ErrVolumeMaxClaims},
		}},
		{"a reader may join a writer", []step{{req: claim("a1", volWriter)}, {req: claim("a2", volReader)}}},
		{"claiming again changes nothing", []step{{req: claim("a1", volWriter)}, {req: claim("a1", volWriter)}}},
		{"an alloc cannot switch from writing to reading", []step{
			{req: claim("a1", volWriter)}, {req: claim("a1", volReader), want: model.ErrClaimModeConflict},
		}},
		{"a write on a read-only mode is refused", []step{{req: claim("a1", writeOnReaderOnly), want: model.ErrWriteClaimRefused}}},
		{"another access mode while claimed is refused", []step{
			{req: claim("a1", volWriter)}, {req: claim("a2", readerOnly), want: csi.ErrClaimRefused},
		}},
		{"a released writer frees its slot", []step{
			{req: claim("a1", volWriter)}, {release: true, req: claim("a1", volWriter)}, {req: claim("a2", volWriter)},
		}},
		{"the last release forgets the access mode", []step{
			{req: claim("a1", volWriter)}, {release: true, req: claim("a1", volWriter)}, {req: claim("a2", readerOnly)},
		}},
		{"releasing what is not held changes nothing", []step{{release: true, req: claim("a9", volWriter)}, {req: claim("a1", volWriter)}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := volumes.NewLocalClaimer()
			for i, s := range tc.steps {
				var err error
				if s.release {
					err = c.Release(t.Context(), s.req)
				} else {
					err = c.Claim(t.Context(), s.req)
				}
				if s.want == nil {
					require.NoError(t, err, "step %d", i+1)
					continue
				}
				require.ErrorIs(t, err, csi.ErrClaimRefused, "step %d", i+1)
				require.ErrorIs(t, err, s.want, "step %d", i+1)
			}
		})
	}
}

// TestMountVolumeOfTheHostpathPlugin mounts a volume of the reference
// hostpath plugin for an alloc, writes through the target path, and
// unmounts it: as root the target is a real bind mount.
func TestMountVolumeOfTheHostpathPlugin(t *testing.T) {
	root := os.Geteuid() == 0
	system := probe.NewSystem(t)
	reg := volRegistry(t, system)
	srv := hostpathtest.Serve(t, hostpath.Config{NodeID: "node-1", Root: hostpathtest.TempDir(t), SymlinkFallback: !root})
	volRegister(t, reg, srv.Endpoint)

	ctx, cancel := context.WithTimeout(t.Context(), volWait)
	defer cancel()
	client, err := csi.Dial(ctx, srv.Endpoint, csi.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, client.Close()) }()
	created, err := client.CreateVolume(ctx, &csipb.CreateVolumeRequest{
		Name: "data", VolumeCapabilities: []*csipb.VolumeCapability{volCapability(volWriter)},
	})
	require.NoError(t, err)
	volID := created.GetVolume().GetVolumeId()

	vm := volStart(t, system, reg, hostpathtest.TempDir(t)) // its cleanup unmounts leftovers
	mounter, err := vm.MounterForPlugin(ctx, volPlugin)
	require.NoError(t, err)
	res, err := mounter.MountVolume(ctx, volMount(volID, "alloc-1", volWriter))
	require.NoError(t, err)

	require.NoError(t, os.WriteFile(filepath.Join(res.TargetPath, "hello.txt"), []byte("hello"), 0o644))
	volumeDir, err := srv.Driver.VolumePath(volID)
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(volumeDir, "hello.txt"))
	require.NoError(t, err)
	require.Equal(t, "hello", string(data), "the file written through the target path is in the volume")
	if root {
		require.Contains(t, volMountPoints(t), res.TargetPath, "the target is a bind mount")
	} else {
		t.Logf("running as uid %d, not root: the plugin published a symlink, not a bind mount; skipping the mount table checks", os.Geteuid())
	}

	require.NoError(t, mounter.UnmountVolume(ctx, volumes.UnmountRequest{VolumeID: volID, AllocID: "alloc-1"}))
	require.NotContains(t, volMountPoints(t), res.TargetPath, "the bind mount is gone")
	require.NoFileExists(t, res.TargetPath)
	require.NoDirExists(t, res.TargetPath)
	require.FileExists(t, filepath.Join(volumeDir, "hello.txt"), "unmounting keeps the data")
}

// volMountPoints lists the mount points in /proc/self/mountinfo.
func volMountPoints(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	require.NoError(t, err)
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 {
			points = append(points, fields[4])
		}
	}
	require.NoError(t, sc.Err())
	return points
}
