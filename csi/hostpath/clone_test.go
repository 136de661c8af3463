package hostpath_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
)

// TestACloneHasItsSourcesFilesAndIsIdempotent clones a volume with files:
// the clone has a copy of them (a write to the source afterwards does not
// reach it), names its source, and the same create again finds it, while
// the same name with another source is AlreadyExists. A clone asked
// smaller than its source, or with no size (as upstream's driver, which
// takes none as 0), is OutOfRange, naming both sizes.
func TestACloneHasItsSourcesFilesAndIsIdempotent(t *testing.T) {
	p := serve(t, config(t))
	source, dir := p.createWithData(t, "source", "before")

	source1MiB := &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
		Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: source}}}
	for _, size := range []int64{0, 1<<20 - 1} {
		small := createReq("clone", size)
		small.VolumeContentSource = source1MiB
		_, err := p.ctrl.CreateVolume(t.Context(), small)
		requireCode(t, codes.OutOfRange, err)
		require.ErrorContains(t, err, fmt.Sprintf("of 1048576 bytes is larger than the requested volume size %d", size))
	}
	req := createReq("clone", 1<<20)
	req.VolumeContentSource = source1MiB
	clone, err := p.ctrl.CreateVolume(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, source, clone.GetVolume().GetContentSource().GetVolume().GetVolumeId())
	require.EqualValues(t, 1<<20, clone.GetVolume().GetCapacityBytes())
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sub", "data"), []byte("after"), 0o644))
	cloneDir, err := p.srv.Driver.VolumePath(clone.GetVolume().GetVolumeId())
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(cloneDir, "sub", "data"))
	require.NoError(t, err)
	require.Equal(t, "before", string(data), "the clone is a copy")

	again, err := p.ctrl.CreateVolume(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, clone.GetVolume().GetVolumeId(), again.GetVolume().GetVolumeId())
	other := p.create(t, "other")
	req.VolumeContentSource.GetVolume().VolumeId = other
	_, err = p.ctrl.CreateVolume(t.Context(), req)
	requireCode(t, codes.AlreadyExists, err)
	_, err = p.ctrl.CreateVolume(t.Context(), createReq("clone", 1<<20))
	requireCode(t, codes.AlreadyExists, err) // the same name without the source
}

// createWithData creates a volume whose directory holds sub/data with
// content, and returns its ID and directory.
func (p *plugin) createWithData(t *testing.T, name, content string) (id, dir string) {
	t.Helper()
	id = p.create(t, name)
	dir, err := p.srv.Driver.VolumePath(id)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sub", "data"), []byte(content), 0o644))
	return id, dir
}
