package volumes_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"go.uber.org/mock/gomock"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/volumes"
)

// TestAPluginThatLeavesItsTargetBusyIsErrTargetBusy has the plugin answer
// NodeUnpublishVolume with success but leave something in the target, as
// a plugin whose umount the kernel refused may: the unmount fails with
// ErrTargetBusy (the API's 409, not a 500), naming the target and what to
// do, across the actor boundary, and the publish stays recorded.
func TestAPluginThatLeavesItsTargetBusyIsErrTargetBusy(t *testing.T) {
	n := newNode(t, nil)
	n.catalog.add("vol", "vol", "mock", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem)
	m := newMockPlugin(t, n, false, false)
	m.nodeCaps().AnyTimes()
	m.controllerCaps().AnyTimes()
	m.Node.EXPECT().NodePublishVolume(gomock.Any(), gomock.Any()).DoAndReturn(
		func(_ context.Context, r *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
			return &csipb.NodePublishVolumeResponse{}, os.MkdirAll(r.GetTargetPath(), 0o700)
		})
	m.Node.EXPECT().NodeUnpublishVolume(gomock.Any(), gomock.Any()).DoAndReturn(
		func(_ context.Context, r *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
			return &csipb.NodeUnpublishVolumeResponse{}, os.WriteFile(filepath.Join(r.GetTargetPath(), "held"), nil, 0o600)
		}).AnyTimes()
	mounted, err := n.manager.Mount(ctx, "", "vol", "web-1", false)
	require.NoError(t, err)

	err = n.manager.Unmount(ctx, "", "vol", "web-1")
	require.True(t, errors.Is(err, volumes.ErrTargetBusy), "got %v", err)
	require.ErrorContains(t, err, mounted.TargetPath+" mounted or not empty (directory not empty); stop what uses it, then unmount again")
	st := n.settle("vol")
	require.Len(t, st.Record.GetPublishes(), 1, "the publish stays recorded")
}

// TestEveryCodeAPluginAnswersComesBackAsItsSentinel has the plugin fail
// NodePublishVolume with each gRPC code: the mount's error, back across
// the actor boundary, matches the csi sentinel of that code, which the
// API maps to its status (a lost kind would be a 500).
func TestEveryCodeAPluginAnswersComesBackAsItsSentinel(t *testing.T) {
	n := newNode(t, nil)
	n.catalog.add("vol", "vol", "mock", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem)
	m := newMockPlugin(t, n, false, false)
	m.nodeCaps().AnyTimes()
	m.controllerCaps().AnyTimes()
	var answer atomic.Uint32
	m.Node.EXPECT().NodePublishVolume(gomock.Any(), gomock.Any()).DoAndReturn(
		func(context.Context, *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
			return nil, status.Error(codes.Code(answer.Load()), "the plugin's words")
		}).AnyTimes()
	m.Node.EXPECT().NodeUnpublishVolume(gomock.Any(), gomock.Any()).Return(&csipb.NodeUnpublishVolumeResponse{}, nil).AnyTimes()
	sentinels := map[codes.Code]error{
		codes.Canceled: csi.ErrCanceled, codes.Unknown: csi.ErrUnknown, codes.InvalidArgument: csi.ErrInvalidArgument,
		codes.DeadlineExceeded: csi.ErrDeadlineExceeded, codes.NotFound: csi.ErrNotFound, codes.AlreadyExists: csi.ErrAlreadyExists,
		codes.PermissionDenied: csi.ErrPermissionDenied, codes.ResourceExhausted: csi.ErrResourceExhausted,
		codes.FailedPrecondition: csi.ErrFailedPrecondition, codes.Aborted: csi.ErrAborted, codes.OutOfRange: csi.ErrOutOfRange,
		codes.Unimplemented: csi.ErrUnimplemented, codes.Internal: csi.ErrInternal, codes.Unavailable: csi.ErrUnavailable,
		codes.DataLoss: csi.ErrDataLoss, codes.Unauthenticated: csi.ErrUnauthenticated,
	}
	for code, sentinel := range sentinels {
		answer.Store(uint32(code))
		_, err := n.manager.Mount(ctx, "", "vol", "web-1", false)
		require.True(t, errors.Is(err, sentinel), "%s: got %v", code, err)
		n.settle("vol")
	}
}
