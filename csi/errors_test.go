package csi_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"go.uber.org/mock/gomock"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/names"
)

// TestAPluginsHostileMessageIsCutAndMadeSafe is part of attack 5 of issue
// 39: a plugin answered NodePublishVolume with a 3 MB message holding a
// fake log line, U+202E and bytes that are not UTF-8, which reached the
// API's answer and the log whole. Every RPC's error keeps the code's
// sentinel and names.Text of the message: one line of UTF-8, cut at
// names.MaxTextLen bytes.
func TestAPluginsHostileMessageIsCutAndMadeSafe(t *testing.T) {
	m, c := servedMocks(t, testOptions)
	hostile := "mount failed\nlevel=INFO msg=\"all good\" \u202Egnp.exe\xff" + strings.Repeat("x", 3<<20)
	m.Node.EXPECT().NodePublishVolume(gomock.Any(), gomock.Any()).Return(nil, status.Error(codes.Internal, hostile))
	_, err := c.NodePublishVolume(t.Context(), &csipb.NodePublishVolumeRequest{VolumeId: "v1"})
	require.ErrorIs(t, err, csi.ErrInternal)
	msg := err.Error()
	require.LessOrEqual(t, len(msg), names.MaxTextLen+100)
	require.True(t, utf8.ValidString(msg))
	require.NotContains(t, msg, "\u202E")
	require.NotContains(t, msg, "\n")
	require.True(t, strings.HasPrefix(msg, `NodePublishVolume: internal error: mount failed level=INFO msg="all good" gnp.exe`+"\uFFFD"), msg[:100])
	require.Regexp(t, `… \(cut at 1024 of 31457[0-9]{2} bytes\)$`, msg)
}
