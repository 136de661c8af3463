package csitest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/mock/gomock"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/plugvisor/plugvisor/csi/csitest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// recordingTB records failures instead of failing the test, so that a test
// can check what csitest reports.
type recordingTB struct {
	testing.TB
	mu       sync.Mutex
	failures []string
}

func (r *recordingTB) Error(args ...any) { r.record(fmt.Sprint(args...)) }

func (r *recordingTB) Errorf(format string, args ...any) { r.record(fmt.Sprintf(format, args...)) }

func (r *recordingTB) record(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, msg)
}

func (r *recordingTB) recorded() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.failures...)
}

// identityClient connects a plain gRPC client to socketPath.
func identityClient(t *testing.T, socketPath string) csipb.IdentityClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socketPath, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, conn.Close()) })
	return csipb.NewIdentityClient(conn)
}

func TestServedMocksAnswerOnARealSocket(t *testing.T) {
	m := csitest.NewMocks(t)
	path := csitest.SocketPath(t)
	m.Serve(t, path)
	m.Identity.EXPECT().GetPluginInfo(gomock.Any(), csitest.ProtoEq(&csipb.GetPluginInfoRequest{})).
		Return(&csipb.GetPluginInfoResponse{Name: "disk.csi.example.com", VendorVersion: "1.0"}, nil)

	resp, err := identityClient(t, path).GetPluginInfo(t.Context(), &csipb.GetPluginInfoRequest{})
	require.NoError(t, err)
	require.Equal(t, "disk.csi.example.com", resp.GetName())
}

func TestAnUnexpectedCallFailsTheTestAndAnswersInternal(t *testing.T) {
	tb := &recordingTB{TB: t}
	m := csitest.NewMocks(tb) // no expectations
	path := csitest.SocketPath(t)
	m.Serve(t, path)

	_, err := identityClient(t, path).Probe(t.Context(), &csipb.ProbeRequest{})
	require.Equal(t, codes.Internal, status.Code(err), "got %v", err)
	require.ErrorContains(t, err, "/csi.v1.Identity/Probe panicked")
	failures := tb.recorded()
	require.Len(t, failures, 1)
	require.Contains(t, failures[0], "Unexpected call to")
}

func TestAServiceLeftOutAnswersUnimplemented(t *testing.T) {
	path := csitest.SocketPath(t)
	csitest.Serve(t, path, csitest.Services{})

	_, err := identityClient(t, path).Probe(t.Context(), &csipb.ProbeRequest{})
	require.Equal(t, codes.Unimplemented, status.Code(err), "got %v", err)
}

func TestStopWaitsForHandlersAndRemovesTheSocket(t *testing.T) {
	m := csitest.NewMocks(t)
	path := csitest.SocketPath(t)
	srv := m.Serve(t, path)
	entered, release := make(chan struct{}), make(chan struct{})
	m.Identity.EXPECT().Probe(gomock.Any(), gomock.Any()).DoAndReturn(
		func(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
			close(entered)
			<-release
			return &csipb.ProbeResponse{}, nil
		})
	client := identityClient(t, path)
	go func() {
		<-entered
		close(release)
	}()
	_, err := client.Probe(t.Context(), &csipb.ProbeRequest{})
	require.NoError(t, err)

	srv.Stop()
	srv.Stop()
	require.NoFileExists(t, path)
}
