package hostpath_test

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/plugvisor/plugvisor/csi/hostpath"
)

// TestModifyVolumeSetsKnownMutableParametersAndRefusesOthers: the known
// keys are recorded (others kept), none changes nothing, and an unknown
// key, a bad value or an unknown volume is refused, changing nothing.
func TestModifyVolumeSetsKnownMutableParametersAndRefusesOthers(t *testing.T) {
	p := serve(t, config(t))
	id := p.create(t, "v")
	modify := func(id string, params map[string]string) error {
		_, err := p.ctrl.ControllerModifyVolume(t.Context(), &csi.ControllerModifyVolumeRequest{VolumeId: id, MutableParameters: params})
		return err
	}
	require.NoError(t, modify(id, map[string]string{hostpath.MutableTier: "fast"}))
	require.NoError(t, modify(id, map[string]string{hostpath.MutableLabel: "db"}))
	want := map[string]string{hostpath.MutableTier: "fast", hostpath.MutableLabel: "db"}
	got, err := p.srv.Driver.MutableParameters(id)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.NoError(t, modify(id, nil), "none changes nothing")

	for name, tc := range map[string]struct {
		id     string
		params map[string]string
		code   codes.Code
	}{
		"an unknown key":    {id, map[string]string{"iops": "5000"}, codes.InvalidArgument},
		"a bad tier":        {id, map[string]string{hostpath.MutableTier: "platinum"}, codes.InvalidArgument},
		"an unknown volume": {"nope", map[string]string{hostpath.MutableTier: "fast"}, codes.NotFound},
	} {
		requireCode(t, tc.code, modify(tc.id, tc.params))
		got, err := p.srv.Driver.MutableParameters(id)
		require.NoError(t, err)
		require.Equal(t, want, got, "%s changed nothing", name)
	}
	req := createReq("w", 0)
	req.MutableParameters = map[string]string{"iops": "1"}
	_, err = p.ctrl.CreateVolume(t.Context(), req)
	requireCode(t, codes.InvalidArgument, err)
}
