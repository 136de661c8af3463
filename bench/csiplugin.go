package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"syscall"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
)

// CSISocket is the socket of plugin i of a CSI fleet served from dir.
func CSISocket(dir string, i int) string {
	return filepath.Join(dir, fmt.Sprintf("%d.sock", i))
}

// CSIServer is one gRPC server of a healthy CSI node plugin listening on
// many unix sockets, one per plugin of a fleet: the plugin side of the CSI
// benchmarks (run in a process of its own, so that its memory is not
// counted as plugvisor's).
type CSIServer struct {
	grpc    *grpc.Server
	serving sync.WaitGroup
	once    sync.Once
}

// ServeCSI serves a healthy CSI node plugin on the sockets CSISocket(dir, i)
// for i from first to last-1, each listening before it returns.
func ServeCSI(dir string, first, last int) (*CSIServer, error) {
	s := &CSIServer{grpc: grpc.NewServer()}
	csipb.RegisterIdentityServer(s.grpc, healthyIdentity{})
	csipb.RegisterNodeServer(s.grpc, healthyNode{})
	for i := first; i < last; i++ {
		lis, err := net.Listen("unix", CSISocket(dir, i))
		if err != nil {
			s.Stop()
			return nil, fmt.Errorf("bench: serve CSI plugin %d: %w", i, err)
		}
		s.serving.Add(1)
		go func() {
			defer s.serving.Done()
			_ = s.grpc.Serve(lis) // returns when Stop closes the listener
		}()
	}
	return s, nil
}

// Stop closes every socket and connection and waits for the serving
// goroutines to end.
func (s *CSIServer) Stop() {
	s.once.Do(func() {
		s.grpc.Stop()
		s.serving.Wait()
	})
}

// healthyIdentity answers every fingerprint of a node plugin: plugin info,
// no plugin capabilities (a node-only plugin), ready.
type healthyIdentity struct {
	csipb.UnimplementedIdentityServer
}

func (healthyIdentity) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{Name: "bench.csi.plugvisor.io", VendorVersion: "1.0.0"}, nil
}

func (healthyIdentity) GetPluginCapabilities(context.Context, *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	return &csipb.GetPluginCapabilitiesResponse{}, nil
}

func (healthyIdentity) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	return &csipb.ProbeResponse{}, nil
}

type healthyNode struct {
	csipb.UnimplementedNodeServer
}

func (healthyNode) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	return &csipb.NodeGetInfoResponse{NodeId: "bench-node"}, nil
}

func (healthyNode) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	return &csipb.NodeGetCapabilitiesResponse{Capabilities: []*csipb.NodeServiceCapability{{
		Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{
			Type: csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		}},
	}}}, nil
}

// FileLimits returns this process's soft and hard limits of open files.
func FileLimits() (soft, hard uint64, err error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, 0, fmt.Errorf("bench: getrlimit: %w", err)
	}
	return lim.Cur, lim.Max, nil
}

// RaiseFileLimit raises this process's limit of open files to at least
// want when it can: the soft limit up to the hard one, and the hard one
// too where the process may (root). It returns the soft limit in force
// afterwards, which may still be below want.
func RaiseFileLimit(want uint64) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("bench: getrlimit: %w", err)
	}
	if lim.Cur >= want {
		return lim.Cur, nil
	}
	raised := syscall.Rlimit{Cur: want, Max: max(lim.Max, want)}
	err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised)
	if errors.Is(err, syscall.EPERM) && lim.Cur < lim.Max {
		raised = syscall.Rlimit{Cur: lim.Max, Max: lim.Max}
		err = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised)
	}
	if err != nil {
		return lim.Cur, fmt.Errorf("bench: setrlimit: %w", err)
	}
	return raised.Cur, nil
}
