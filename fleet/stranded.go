package fleet

import (
	"context"
	"maps"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
)

// The GC and the Detachers meet at two more key families, both with empty
// values:
//   - stranded/<node>: put by the GC's leader when node is down with
//     attachments, and again once it freed node's claims; deleted when the
//     node is up again or has no attachment left. The Detachers watch them.
//   - detaching/<ns>/<id>/<node>: the guard of the one node that detaches
//     the volume from node, under that node's lease, so that it goes with
//     a detacher that dies.

func (k keys) strandedMarks() string           { return k.prefix + "stranded/" }
func (k keys) strandedMark(node string) string { return k.strandedMarks() + node }
func (k keys) detachGuard(ns, id, node string) string {
	return k.prefix + "detaching/" + ns + "/" + id + "/" + node
}

// mark puts (on) or deletes the stranded mark of node; a put of a mark
// already there wakes the Detachers again.
func (s *Store) mark(ctx context.Context, node string, on bool) error {
	return s.call(ctx, "mark a down node's attachments", func(ctx context.Context) error {
		op := clientv3.OpDelete(s.keys.strandedMark(node))
		if on {
			op = clientv3.OpPut(s.keys.strandedMark(node), "")
		}
		_, err := s.client.Do(ctx, op)
		return etcdErr(err)
	})
}

// Stranded is an attachment of a volume to a node that is down and holds
// no claim on it: no alloc there will unmount it, so the plugin's
// controller must detach it from another node.
type Stranded struct {
	Namespace, VolumeID, PluginID string
	Attachment                    *model.Attachment
}

// Stranded returns the attachments of down nodes that hold no claim, held
// or being released, on their volume, and those another node began to
// detach (MarkDetaching), sorted by volume, then node. A down node's claims
// are freed by GC once its grace is over; its attachments then show here.
func (s *Store) Stranded(ctx context.Context) ([]Stranded, error) {
	volumes, live, err := s.volumesAndNodes(ctx, func(v *model.CSIVolume) bool { return len(v.Attachments) > 0 })
	if err != nil {
		return nil, err
	}
	var out []Stranded
	for _, v := range volumes {
		for _, node := range slices.Sorted(maps.Keys(v.Attachments)) {
			if strandedOn(v, node, live[node]) {
				out = append(out, Stranded{Namespace: v.Namespace, VolumeID: v.ID, PluginID: v.PluginID, Attachment: v.Attachments[node]})
			}
		}
	}
	return out, nil
}

// strandedOn reports whether v's attachment to node is stranded: being
// detached, or of a node that is down and holds no claim on v.
func strandedOn(v *model.CSIVolume, node string, live bool) bool {
	if v.Attachments[node].State == model.AttachmentStateDetaching {
		return true
	}
	return !live && !slices.ContainsFunc(v.AllClaims(), func(c *model.Claim) bool { return c.NodeID == node })
}

// StrandedOf returns the stranded attachments of node (see Stranded),
// sorted by volume: it reads node's attachments through the node index,
// not every volume.
func (s *Store) StrandedOf(ctx context.Context, node string) ([]Stranded, error) {
	var out []Stranded
	err := s.call(ctx, "look for the stranded attachments of a node", func(ctx context.Context) error {
		up, err := s.client.Get(ctx, s.keys.node(node), clientv3.WithCountOnly())
		if err != nil {
			return etcdErr(err)
		}
		refs, err := s.indexedVolumes(ctx, s.attachmentIndex(), node, nil)
		if err != nil {
			return err
		}
		for _, ref := range refs {
			v, _, err := s.readVolume(ctx, ref.ns, ref.id)
			if err != nil {
				return err
			}
			if v != nil && v.Attachments[node] != nil && strandedOn(v, node, up.Count > 0) {
				out = append(out, Stranded{Namespace: v.Namespace, VolumeID: v.ID, PluginID: v.PluginID, Attachment: v.Attachments[node]})
			}
		}
		return nil
	})
	return out, err
}

// guardDetach takes the guard of the detach of st for this node, under
// its lease, and looks at the volume again under it: false when another
// node holds it, or st is no longer stranded. release gives it back.
func (s *Store) guardDetach(ctx context.Context, st Stranded) (taken bool, release func(), err error) {
	key := s.keys.detachGuard(st.Namespace, st.VolumeID, st.Attachment.NodeID)
	self := s.cfg.NodeID
	s.lease.mu.Lock()
	lease := s.lease.id
	s.lease.mu.Unlock()
	err = s.call(ctx, "guard a detach", func(ctx context.Context) error {
		resp, err := s.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, self, clientv3.WithLease(lease))).
			Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			return etcdErr(err)
		}
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if taken = resp.Succeeded || len(kvs) > 0 && string(kvs[0].Value) == self; !taken {
			return nil
		}
		// Under the guard, look again: the node that held it may have
		// detached the volume since st was read.
		v, _, err := s.readVolume(ctx, st.Namespace, st.VolumeID)
		if err != nil {
			return err
		}
		up, err := s.client.Get(ctx, s.keys.node(st.Attachment.NodeID), clientv3.WithCountOnly())
		if err != nil {
			return etcdErr(err)
		}
		taken = v != nil && v.Attachments[st.Attachment.NodeID] != nil && strandedOn(v, st.Attachment.NodeID, up.Count > 0)
		return nil
	})
	release = func() {
		_ = s.call(context.Background(), "release a detach guard", func(ctx context.Context) error {
			_, err := s.client.Txn(ctx).If(clientv3.Compare(clientv3.Value(key), "=", self)).Then(clientv3.OpDelete(key)).Commit()
			return etcdErr(err)
		})
	}
	if err != nil || !taken {
		release()
		taken = false
	}
	return taken, release, err
}
