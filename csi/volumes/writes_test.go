package volumes_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/storage"
)

// recordingBucket keeps, for each Apply, the states of the records it
// writes ("deleted" for a delete).
type recordingBucket struct {
	storage.Bucket
	mu     sync.Mutex
	states []string
}

func (r *recordingBucket) Apply(ops []storage.Op) error {
	r.mu.Lock()
	for _, op := range ops {
		if op.Value == nil {
			r.states = append(r.states, "deleted")
			continue
		}
		rec := &messages.VolumeRecord{}
		if err := proto.Unmarshal(op.Value, rec); err != nil {
			r.states = append(r.states, err.Error())
			continue
		}
		r.states = append(r.states, fmt.Sprintf("publish %s, stage %s", rec.GetPublishes()["web-1"].GetState(), rec.GetStage().GetState()))
	}
	r.mu.Unlock()
	return r.Bucket.Apply(ops)
}

// TestAMountAndUnmountWriteARecordBeforeAndAfterEachRPC mounts and
// unmounts a volume of a plugin that stages and does not attach, and
// checks each durable write: seven, each the one before or after an RPC
// (or the catalog's claim), a step's done state going with the next
// step's first record where they follow each other.
func TestAMountAndUnmountWriteARecordBeforeAndAfterEachRPC(t *testing.T) {
	writes := &recordingBucket{}
	n, plugin := newHostpathNode(t, func(b storage.Bucket) storage.Bucket {
		writes.Bucket = b
		return writes
	}, nil)
	p := &strictPlugin{t: t, socket: plugin.Endpoint}
	n.catalog.add("vol", p.createVolume("vol"), "hp", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem)

	_, err := n.manager.Mount(ctx, "", "vol", "web-1", false)
	require.NoError(t, err)
	require.NoError(t, n.manager.Unmount(ctx, "", "vol", "web-1"))
	require.Equal(t, []string{
		"publish claiming, stage ",           // before the claim
		"publish claiming, stage staging",    // before NodeStageVolume
		"publish publishing, stage staged",   // after NodeStageVolume, before NodePublishVolume
		"publish published, stage staged",    // after NodePublishVolume
		"publish unpublishing, stage staged", // before NodeUnpublishVolume
		"publish releasing, stage unstaging", // after it, before NodeUnstageVolume
		"deleted",                            // after it and the claim's release
	}, writes.states)
	require.Empty(t, mountsUnder(t, n.root))
}
