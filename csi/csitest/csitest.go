// Package csitest serves CSI plugins for tests: gomock CSI servers from
// github.com/kubernetes-csi/csi-test/v5/driver, or any other implementation,
// on real unix sockets from a grpc.Server of its own.
//
// A gomock controller reports an unexpected call with Fatalf, which from a
// gRPC handler goroutine would end the goroutine without an answer or kill
// the test binary. Controllers made by [NewController] (and [NewMocks])
// fail the test and panic instead, and the server's recover interceptor
// turns the panic into a codes.Internal answer, so the client under test
// sees an error and the test reports the unexpected call.
package csitest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-test/v5/driver"
	"go.uber.org/mock/gomock"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// NewController returns a gomock controller for t that is safe to use from
// gRPC handler goroutines: a fatal failure fails t and then panics, for the
// recover interceptor of a [Server] to turn into codes.Internal. Missing
// calls are reported when t's cleanup runs, as with gomock.NewController.
func NewController(t testing.TB) *gomock.Controller {
	t.Helper()
	return gomock.NewController(panickingReporter{t})
}

// panickingReporter is a gomock reporter whose Fatalf panics instead of
// calling runtime.Goexit, which recover cannot stop.
type panickingReporter struct {
	testing.TB
}

// Fatalf fails the test and panics with the message.
func (r panickingReporter) Fatalf(format string, args ...any) {
	r.Helper()
	msg := fmt.Sprintf(format, args...)
	r.Error(msg)
	panic("csitest: " + msg)
}

// Mocks is one gomock controller with a mock for each CSI service, so that
// gomock.InOrder can order calls across services.
type Mocks struct {
	Ctrl       *gomock.Controller
	Identity   *driver.MockIdentityServer
	Controller *driver.MockControllerServer
	Node       *driver.MockNodeServer
}

// NewMocks returns the three mock services on one controller from [NewController].
func NewMocks(t testing.TB) *Mocks {
	t.Helper()
	ctrl := NewController(t)
	return &Mocks{
		Ctrl:       ctrl,
		Identity:   driver.NewMockIdentityServer(ctrl),
		Controller: driver.NewMockControllerServer(ctrl),
		Node:       driver.NewMockNodeServer(ctrl),
	}
}

// Serve serves the three mocks on socketPath until t's cleanup; see [Serve].
func (m *Mocks) Serve(t testing.TB, socketPath string) *Server {
	t.Helper()
	return Serve(t, socketPath, m.Services())
}

// Services returns the mocks as CSI services for [NewServer] and [Serve].
// (The generated mocks lack the csi package's unexported
// forward-compatibility method, so each is paired with the csi Unsafe
// interface, as csi-test's own driver does.)
func (m *Mocks) Services() Services {
	return Services{
		Identity: struct {
			csipb.UnsafeIdentityServer
			*driver.MockIdentityServer
		}{MockIdentityServer: m.Identity},
		Controller: struct {
			csipb.UnsafeControllerServer
			*driver.MockControllerServer
		}{MockControllerServer: m.Controller},
		Node: struct {
			csipb.UnsafeNodeServer
			*driver.MockNodeServer
		}{MockNodeServer: m.Node},
	}
}

// Services are the CSI services a [Server] carries; a nil one is not
// registered, so calls to it answer codes.Unimplemented.
type Services struct {
	Identity   csipb.IdentityServer
	Controller csipb.ControllerServer
	Node       csipb.NodeServer
}

// SocketPath returns a socket path in a fresh t.TempDir(), short enough for sun_path.
func SocketPath(t testing.TB) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "csi.sock")
}

// Server is a grpc.Server carrying CSI services, with a recover interceptor.
type Server struct {
	grpc     *grpc.Server
	serving  sync.WaitGroup
	stopOnce sync.Once
}

// NewServer returns a server for services that does not listen yet (see
// [Server.Listen]). t's cleanup stops the server: it waits for
// running handlers, so a test whose handlers block must release them in a
// cleanup registered after NewServer.
func NewServer(t testing.TB, services Services) *Server {
	t.Helper()
	s := &Server{grpc: grpc.NewServer(
		grpc.UnaryInterceptor(recoverUnary),
		grpc.WaitForHandlers(true),
	)}
	if services.Identity != nil {
		csipb.RegisterIdentityServer(s.grpc, services.Identity)
	}
	if services.Controller != nil {
		csipb.RegisterControllerServer(s.grpc, services.Controller)
	}
	if services.Node != nil {
		csipb.RegisterNodeServer(s.grpc, services.Node)
	}
	t.Cleanup(s.Stop)
	return s
}

// Serve starts serving services on a new unix socket at socketPath and
// stops in t's cleanup; see [NewServer].
func Serve(t testing.TB, socketPath string, services Services) *Server {
	t.Helper()
	s := NewServer(t, services)
	if err := s.Listen(socketPath); err != nil {
		t.Fatal(err)
	}
	return s
}

// Listen creates the unix socket at socketPath and serves on it in the
// background. Unlike [Serve] it may be called from any goroutine, e.g. to
// make a socket appear late.
func (s *Server) Listen(socketPath string) error {
	lis, err := net.Listen("unix", socketPath)
	if err != nil {
		return fmt.Errorf("csitest: listen: %w", err)
	}
	s.serving.Add(1)
	go func() {
		defer s.serving.Done()
		if err := s.grpc.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			panic(fmt.Sprintf("csitest: serve %s: %v", socketPath, err))
		}
	}()
	return nil
}

// Stop closes the sockets and connections, removes the socket files, and
// waits until every handler has returned and every Serve goroutine has
// ended. Calling it again does nothing.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		s.grpc.Stop()
		s.serving.Wait()
	})
}

// recoverUnary turns a panicking handler into a codes.Internal answer.
func recoverUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			resp, err = nil, status.Errorf(codes.Internal, "csitest: %s panicked: %v", info.FullMethod, r)
		}
	}()
	return handler(ctx, req)
}

// ProtoEq returns a gomock matcher for protobuf messages equal to want
// (proto.Equal), for asserting the exact request a plugin received.
func ProtoEq(want proto.Message) gomock.Matcher {
	return protoMatcher{want: want}
}

type protoMatcher struct {
	want proto.Message
}

// Matches reports whether x is a message equal to the wanted one.
func (m protoMatcher) Matches(x any) bool {
	got, ok := x.(proto.Message)
	return ok && proto.Equal(got, m.want)
}

// String describes the wanted message.
func (m protoMatcher) String() string {
	return fmt.Sprintf("is %T {%s}", m.want, prototext.MarshalOptions{}.Format(m.want))
}
