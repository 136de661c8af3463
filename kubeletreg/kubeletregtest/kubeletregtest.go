// Package kubeletregtest serves the pluginregistration.v1 API in a test,
// as node-driver-registrar serves it beside a CSI driver, for kubelet's
// plugin watcher (or plugvisor's) to find.
package kubeletregtest

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc"
	regapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Sidecar is a registration server on a unix socket: GetInfo answers Info
// (or, with Hang, blocks until the call ends), and every
// NotifyRegistrationStatus lands in Statuses.
type Sidecar struct {
	regapi.UnimplementedRegistrationServer
	// Socket is the registration socket's path.
	Socket string
	// Statuses receives each NotifyRegistrationStatus, in order.
	Statuses chan *regapi.RegistrationStatus

	info   *regapi.PluginInfo
	hang   bool
	server *grpc.Server
	served chan struct{}
}

// GetInfo answers the plugin's info, or blocks until the call ends.
func (s *Sidecar) GetInfo(ctx context.Context, _ *regapi.InfoRequest) (*regapi.PluginInfo, error) {
	if s.hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.info, nil
}

// NotifyRegistrationStatus records the status.
func (s *Sidecar) NotifyRegistrationStatus(_ context.Context, st *regapi.RegistrationStatus) (*regapi.RegistrationStatusResponse, error) {
	s.Statuses <- st
	return &regapi.RegistrationStatusResponse{}, nil
}

// Serve serves info at socket until Stop or the end of the test.
func Serve(t testing.TB, socket string, info *regapi.PluginInfo) *Sidecar {
	return serve(t, socket, info, false)
}

// ServeHanging serves at socket a GetInfo that never answers.
func ServeHanging(t testing.TB, socket string) *Sidecar { return serve(t, socket, nil, true) }

func serve(t testing.TB, socket string, info *regapi.PluginInfo, hang bool) *Sidecar {
	t.Helper()
	s := &Sidecar{Socket: socket, info: info, hang: hang, Statuses: make(chan *regapi.RegistrationStatus, 100),
		server: grpc.NewServer(), served: make(chan struct{})}
	regapi.RegisterRegistrationServer(s.server, s)
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatalf("kubeletregtest: %v", err)
	}
	go func() {
		defer close(s.served)
		_ = s.server.Serve(l)
	}()
	t.Cleanup(s.Stop)
	return s
}

// Stop stops the server and removes its socket, as a sidecar that exits.
func (s *Sidecar) Stop() {
	s.server.Stop()
	<-s.served
	_ = os.Remove(s.Socket)
}

// Status waits up to wait for the next NotifyRegistrationStatus.
func (s *Sidecar) Status(t testing.TB, wait time.Duration) *regapi.RegistrationStatus {
	t.Helper()
	select {
	case st := <-s.Statuses:
		return st
	case <-time.After(wait):
		t.Fatalf("kubeletregtest: no NotifyRegistrationStatus on %s within %v", s.Socket, wait)
		return nil
	}
}

// CSIInfo is what node-driver-registrar answers for the CSI plugin name
// at endpoint.
func CSIInfo(name, endpoint string) *regapi.PluginInfo {
	return &regapi.PluginInfo{Type: regapi.CSIPlugin, Name: name, Endpoint: endpoint, SupportedVersions: []string{"1.0.0"}}
}
