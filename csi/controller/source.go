package controller

import (
	"context"
	"fmt"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
)

// maxVolumePages bounds how many pages of ListVolumes sourceSize follows.
const maxVolumePages = 1000

// fitSource sizes a create from a snapshot or a clone by its source, as
// Kubernetes' external-provisioner does before CreateVolume:
//   - a create that asks for no size takes the source's, since a strict
//     driver refuses a volume smaller than its source, and no size is 0;
//   - one that asks for less than the source's size is refused with
//     ErrInvalidRequest naming the field, before any RPC that changes
//     something.
//
// The source's size is the snapshot's (ListSnapshots, when the controller
// advertises LIST_SNAPSHOTS), or the source volume's: the catalog's
// record, else the plugin's (ListVolumes, when advertised). A size that
// cannot be learnt leaves req as it is, for the plugin to judge.
func (c *Controller) fitSource(ctx context.Context, client *csi.Client, req CreateRequest, src *model.CSIVolume) (CreateRequest, error) {
	size, from, err := c.sourceSize(ctx, client, req, src)
	if err != nil || size == 0 {
		return req, err
	}
	remedy := fmt.Sprintf("ask for at least its size, or for none to take it (%d bytes)", size)
	switch {
	case req.RequiredBytes > 0 && req.RequiredBytes < size:
		return req, invalid([]string{fmt.Sprintf("capacity.required_bytes %d is less than the %d bytes of %s: %s",
			req.RequiredBytes, size, from, remedy)})
	case req.LimitBytes > 0 && req.LimitBytes < size:
		return req, invalid([]string{fmt.Sprintf("capacity.limit_bytes %d is less than the %d bytes of %s: %s",
			req.LimitBytes, size, from, remedy)})
	case req.RequiredBytes == 0:
		req.RequiredBytes = size
	}
	return req, nil
}

// sourceSize is the size of req's source and what it is (0 and "" when
// req has none, or its size cannot be learnt).
func (c *Controller) sourceSize(ctx context.Context, client *csi.Client, req CreateRequest, src *model.CSIVolume) (int64, string, error) {
	caps, err := client.ControllerCapabilitiesCached(ctx)
	if err != nil {
		return 0, "", err
	}
	switch {
	case req.SnapshotID != "" && caps.ListSnapshots:
		resp, err := client.ListSnapshots(ctx, &csipb.ListSnapshotsRequest{SnapshotId: req.SnapshotID})
		if err != nil {
			return 0, "", err
		}
		for _, e := range resp.GetEntries() {
			if s := e.GetSnapshot(); s.GetSnapshotId() == req.SnapshotID {
				return s.GetSizeBytes(), fmt.Sprintf("snapshot %q", req.SnapshotID), nil
			}
		}
	case src == nil:
	case src.CapacityBytes > 0:
		return src.CapacityBytes, fmt.Sprintf("source volume %s/%s", src.Namespace, src.ID), nil
	case caps.ListVolumes:
		size, err := pluginVolumeSize(ctx, client, src.PluginVolumeID())
		return size, fmt.Sprintf("source volume %s/%s", src.Namespace, src.ID), err
	}
	return 0, "", nil
}

// pluginVolumeSize is the capacity the plugin lists for its volume id
// (ListVolumes, every page), 0 when it lists none.
func pluginVolumeSize(ctx context.Context, client *csi.Client, id string) (int64, error) {
	rpc := &csipb.ListVolumesRequest{}
	for range maxVolumePages {
		resp, err := client.ListVolumes(ctx, rpc)
		if err != nil {
			return 0, err
		}
		for _, e := range resp.GetEntries() {
			if e.GetVolume().GetVolumeId() == id {
				return e.GetVolume().GetCapacityBytes(), nil
			}
		}
		if rpc.StartingToken = resp.GetNextToken(); rpc.StartingToken == "" {
			return 0, nil
		}
	}
	return 0, fmt.Errorf("ListVolumes: %w: more than %d pages", csi.ErrInvalidResponse, maxVolumePages)
}
