package volumes_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/internal/mountinfo"
)

// strictPlugin is the reference hostpath plugin served from a gRPC server
// of the test's own, whose interceptor adds what a strict attaching driver
// does: the controller advertises PUBLISH_UNPUBLISH_VOLUME and keeps the
// attachments in its storage system's ledger; NodeStageVolume is refused
// before ControllerPublishVolume; NodeUnstageVolume is refused (and counted
// as a violation) while a target of the volume is published. It can hang
// one RPC, before or after doing its work, to stand for an agent killed at
// that point, and it can be restarted on its socket.
type strictPlugin struct {
	t       *testing.T
	driver  *hostpath.Driver
	socket  string
	nodeID  string
	storage *storageSystem

	mu         sync.Mutex
	server     *grpc.Server
	served     chan struct{}
	unlisted   map[string]bool            // volume IDs ListVolumes leaves out
	published  map[string]map[string]bool // volume ID → targets
	violations []string
	calls      []string
	fault      *fault
}

// fault hangs one RPC until release is closed; the RPC then fails with
// Unavailable, or, when pass is set (see hold), is answered.
type fault struct {
	method  string // "NodeStageVolume", ...
	after   bool   // do the work first
	pass    bool
	reached chan struct{}
	release chan struct{}
}

// storageSystem is what the strict plugins of several nodes share, as the
// nodes of one attaching driver share its storage: the hostpath root, and
// the controller's ledger of attachments, which refuses to attach a
// single-node volume to a second node.
type storageSystem struct {
	root string

	mu       sync.Mutex
	attached map[string]map[string]bool // volume ID → node IDs
}

func newStorageSystem(t *testing.T) *storageSystem {
	return &storageSystem{root: filepath.Join(hostpathtest.TempDir(t), "hp"), attached: map[string]map[string]bool{}}
}

// attach records the attachment of volume to node; a single-node volume
// attached to another node is refused with FailedPrecondition.
func (s *storageSystem) attach(volume, node string, mode csipb.VolumeCapability_AccessMode_Mode) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if singleNode(mode) {
		for other := range s.attached[volume] {
			if other != node {
				return status.Errorf(codes.FailedPrecondition, "strict: volume %s is attached to %s", volume, other)
			}
		}
	}
	if s.attached[volume] == nil {
		s.attached[volume] = map[string]bool{}
	}
	s.attached[volume][node] = true
	return nil
}

// detach forgets the attachment of volume to node; an empty node detaches
// it from every node.
func (s *storageSystem) detach(volume, node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if node == "" {
		delete(s.attached, volume)
		return
	}
	delete(s.attached[volume], node)
	if len(s.attached[volume]) == 0 {
		delete(s.attached, volume)
	}
}

// nodes are the nodes volume is attached to, sorted.
func (s *storageSystem) nodes(volume string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.attached[volume]))
}

// volumes are the attached volumes, sorted.
func (s *storageSystem) volumes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.attached))
}

// singleNode reports whether mode lets one node only use a volume.
func singleNode(mode csipb.VolumeCapability_AccessMode_Mode) bool {
	switch mode {
	case csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, csipb.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER,
		csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER:
		return false
	}
	return true
}

// newStrictPlugin starts the strict plugin of node "n1" on a storage
// system of its own.
func newStrictPlugin(t *testing.T, n *node, name string) *strictPlugin {
	return newStrictPluginOn(t, n, name, "n1", newStorageSystem(t))
}

// newStrictPluginOn starts the strict plugin of node nodeID on storage,
// registered as name on n.
func newStrictPluginOn(t *testing.T, n *node, name, nodeID string, storage *storageSystem) *strictPlugin {
	d, err := hostpath.New(hostpath.Config{Name: "hostpath", NodeID: nodeID, Root: storage.root, Logger: hostpathtest.Logger(t)})
	require.NoError(t, err)
	p := &strictPlugin{t: t, driver: d, socket: filepath.Join(hostpathtest.TempDir(t), "csi.sock"), nodeID: nodeID, storage: storage,
		unlisted: map[string]bool{}, published: map[string]map[string]bool{}}
	p.serve()
	// The server stops first, so that no RPC reaches the driver while it
	// stops; the driver, which closes its journal, stops before the storage
	// system's root (a cleanup registered earlier) is removed. The node's
	// manager and registry are shut down after both: the manager's shutdown
	// sends the plugin nothing.
	t.Cleanup(func() {
		p.stop()
		p.driver.Stop()
	})
	n.register(volumes.NodePluginType, name, "a1", p.socket)
	n.register(volumes.ControllerPluginType, name, "a1", p.socket)
	return p
}

func (p *strictPlugin) serve() {
	l, err := net.Listen("unix", p.socket)
	require.NoError(p.t, err)
	s := grpc.NewServer(grpc.UnaryInterceptor(p.intercept))
	p.driver.Register(s)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = s.Serve(l)
	}()
	p.mu.Lock()
	p.server, p.served = s, served
	p.mu.Unlock()
}

func (p *strictPlugin) stop() {
	p.mu.Lock()
	s, served, f := p.server, p.served, p.fault
	p.server, p.fault = nil, nil
	p.mu.Unlock()
	if f != nil {
		f.free()
	}
	if s != nil {
		s.Stop()
		<-served
	}
}

// restart stops serving and serves again on the same socket; the driver
// keeps its state on disk, as a restarted plugin process does.
func (p *strictPlugin) restart() {
	p.stop()
	_ = os.Remove(p.socket)
	p.serve()
}

// hang makes the next call of method hang; it returns the fault.
func (p *strictPlugin) hang(method string, after bool) *fault {
	return p.arm(&fault{method: method, after: after, reached: make(chan struct{}), release: make(chan struct{})})
}

// hold makes the next call of method wait, before any work, until the
// fault is freed, and then be answered as usual.
func (p *strictPlugin) hold(method string) *fault {
	return p.arm(&fault{method: method, pass: true, reached: make(chan struct{}), release: make(chan struct{})})
}

func (p *strictPlugin) arm(f *fault) *fault {
	p.mu.Lock()
	p.fault = f
	p.mu.Unlock()
	return f
}

// unhang takes f back if no call reached it, and frees a call it hangs.
func (p *strictPlugin) unhang(f *fault) {
	p.mu.Lock()
	if p.fault == f {
		p.fault = nil
	}
	p.mu.Unlock()
	f.free()
}

func (f *fault) free() {
	select {
	case <-f.release:
	default:
		close(f.release)
	}
}

func (p *strictPlugin) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := info.FullMethod[strings.LastIndex(info.FullMethod, "/")+1:]
	p.mu.Lock()
	p.calls = append(p.calls, method)
	f := p.fault
	if f != nil && f.method == method {
		p.fault = nil
	} else {
		f = nil
	}
	p.mu.Unlock()
	if f != nil && !f.after {
		close(f.reached)
		<-f.release
		if !f.pass {
			return nil, status.Error(codes.Unavailable, "strict: the agent was killed")
		}
	}
	resp, err := p.answer(ctx, method, req, handler)
	if f != nil && f.after {
		close(f.reached)
		<-f.release
		return nil, status.Error(codes.Unavailable, "strict: the agent was killed")
	}
	return resp, err
}

// answer is the strict plugin's answer to one RPC.
func (p *strictPlugin) answer(ctx context.Context, method string, req any, handler grpc.UnaryHandler) (any, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch r := req.(type) {
	case *csipb.ControllerPublishVolumeRequest:
		if err := p.storage.attach(r.GetVolumeId(), r.GetNodeId(), r.GetVolumeCapability().GetAccessMode().GetMode()); err != nil {
			return nil, err
		}
		return &csipb.ControllerPublishVolumeResponse{PublishContext: map[string]string{"attached-to": r.GetNodeId()}}, nil
	case *csipb.ControllerUnpublishVolumeRequest:
		p.storage.detach(r.GetVolumeId(), r.GetNodeId())
		return &csipb.ControllerUnpublishVolumeResponse{}, nil
	case *csipb.NodePublishVolumeRequest:
		onOneHost(r.GetVolumeCapability())
	case *csipb.NodeStageVolumeRequest:
		onOneHost(r.GetVolumeCapability())
		if !slices.Contains(p.storage.nodes(r.GetVolumeId()), p.nodeID) || r.GetPublishContext()["attached-to"] != p.nodeID {
			return nil, status.Errorf(codes.FailedPrecondition, "strict: volume %s is staged before it is attached here", r.GetVolumeId())
		}
	case *csipb.NodeUnstageVolumeRequest:
		if live := p.published[r.GetVolumeId()]; len(live) > 0 {
			p.violations = append(p.violations, fmt.Sprintf("NodeUnstageVolume of %s while published at %v", r.GetVolumeId(), live))
			return nil, status.Errorf(codes.FailedPrecondition, "strict: volume %s is still published", r.GetVolumeId())
		}
	}
	resp, err := handler(ctx, req)
	if err != nil {
		return resp, err
	}
	switch r := req.(type) {
	case *csipb.ControllerGetCapabilitiesRequest:
		out := resp.(*csipb.ControllerGetCapabilitiesResponse)
		out.Capabilities = append(out.Capabilities, &csipb.ControllerServiceCapability{Type: &csipb.ControllerServiceCapability_Rpc{
			Rpc: &csipb.ControllerServiceCapability_RPC{Type: csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME}}})
	case *csipb.ListVolumesRequest:
		out := resp.(*csipb.ListVolumesResponse)
		out.Entries = slices.DeleteFunc(out.Entries, func(e *csipb.ListVolumesResponse_Entry) bool { return p.unlisted[e.GetVolume().GetVolumeId()] })
		for _, e := range out.Entries {
			e.Status = &csipb.ListVolumesResponse_VolumeStatus{PublishedNodeIds: p.storage.nodes(e.GetVolume().GetVolumeId())}
		}
	case *csipb.NodePublishVolumeRequest:
		if p.published[r.GetVolumeId()] == nil {
			p.published[r.GetVolumeId()] = map[string]bool{}
		}
		p.published[r.GetVolumeId()][r.GetTargetPath()] = true
	case *csipb.NodeUnpublishVolumeRequest:
		delete(p.published[r.GetVolumeId()], r.GetTargetPath())
	}
	return resp, nil
}

// onOneHost gives the driver, which serves single-node modes only (a
// hostpath volume lives on one node), the single-node mode of a
// multi-node capability: the nodes of a storage system in a test share
// one host, so each of them reaches the volume.
func onOneHost(c *csipb.VolumeCapability) {
	switch c.GetAccessMode().GetMode() {
	case csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:
		c.AccessMode.Mode = csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY
	case csipb.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER, csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER:
		c.AccessMode.Mode = csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER
	}
}

// create creates a volume on the plugin and registers it in the catalog's
// default namespace; it returns the plugin's volume ID.
func (p *strictPlugin) create(n *node, id, plugin string, access model.AccessMode) string {
	p.t.Helper()
	return p.createIn(n, "default", id, id, plugin, access)
}

// createIn creates the plugin volume name and registers it as ns/id.
func (p *strictPlugin) createIn(n *node, ns, id, name, plugin string, access model.AccessMode) string {
	p.t.Helper()
	external := p.createVolume(name)
	n.catalog.addIn(ns, id, external, plugin, access, model.AttachmentModeFileSystem)
	return external
}

// createVolume creates the plugin volume name and returns its volume ID.
func (p *strictPlugin) createVolume(name string) string {
	p.t.Helper()
	c, err := csi.Dial(ctx, p.socket, csi.Options{})
	require.NoError(p.t, err)
	defer func() { _ = c.Close() }()
	resp, err := c.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csipb.VolumeCapability{{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}}})
	require.NoError(p.t, err)
	return resp.GetVolume().GetVolumeId()
}

// state is what the plugin holds: attached volumes (to any node of its
// storage system), published targets, and violations of the rules.
func (p *strictPlugin) state() (attached []string, published []string, violations []string) {
	attached = p.storage.volumes()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, targets := range p.published {
		for t := range targets {
			published = append(published, t)
		}
	}
	slices.Sort(published)
	return attached, published, slices.Clone(p.violations)
}

// mountsUnder lists, sorted, the kernel's mounts at or below dir.
func mountsUnder(t testing.TB, dir string) []string {
	t.Helper()
	mounts, err := mountinfo.PointsUnder(mountinfo.DefaultPath, dir)
	require.NoError(t, err)
	return slices.Sorted(maps.Keys(mounts))
}

// TestAStrictPluginsJournalIsClosedWhenItsTestEnds: the strict plugin's
// driver is stopped in the cleanup of the test that started it, so that
// its node journal is not held open until the test process ends.
func TestAStrictPluginsJournalIsClosedWhenItsTestEnds(t *testing.T) {
	var journal string
	t.Run("plugin", func(t *testing.T) {
		n := newNode(t, nil)
		p := newStrictPlugin(t, n, "hp")
		journal = filepath.Join(p.storage.root, "state", "nodes", p.nodeID, "journal")
		require.Contains(t, openFiles(t), journal, "the running driver holds its journal open")
	})
	require.NotEmpty(t, journal)
	for _, f := range openFiles(t) {
		require.False(t, strings.HasPrefix(f, journal), "%s is still open after the test that started its plugin ended", f)
	}
}

// openFiles lists what the test process's file descriptors point at.
func openFiles(t *testing.T) []string {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	var files []string
	for _, fd := range fds {
		if f, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil {
			files = append(files, f)
		}
	}
	return files
}
