package fleet

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/names"
)

// RegisterVolume adds v or changes the description of a volume with no
// claims, by the catalog's rules (model.RegisterOver), and returns the
// volume as registered. Its indexes are etcd's revisions of the record.
func (s *Store) RegisterVolume(ctx context.Context, v *model.CSIVolume) (*model.CSIVolume, error) {
	return s.register(ctx, v, via{})
}

// register is RegisterVolume, reading as how says.
func (s *Store) register(ctx context.Context, v *model.CSIVolume, how via) (*model.CSIVolume, error) {
	if v == nil {
		return nil, model.Refusef(model.ErrInvalid, "volume must not be nil")
	}
	ns, err := model.VolumeKey(v.Namespace, v.ID)
	if err != nil {
		return nil, err
	}
	plugins, err := s.registeredPlugins(ctx, []*model.CSIVolume{v})
	if err != nil {
		return nil, err
	}
	if err := model.TopologyRefusal([]*model.CSIVolume{v}, plugins, false); err != nil {
		return nil, err
	}
	out, err := s.updateSeeing(ctx, "register volume", ns, v.ID, func(old *model.CSIVolume, _ sideRead) (*model.CSIVolume, error) {
		return model.RegisterOver(old, v)
	}, nil, how)
	if err != nil {
		return nil, err
	}
	// The health follows the plugin's counts as read before the write,
	// which the write does not change.
	out.Health = model.PluginHealth(plugins[out.PluginID])
	return out, nil
}

// CheckRoom is nil when the volume (namespace, id) is in the fleet or the
// fleet holds fewer than Config.MaxVolumes volumes, else
// model.ErrVolumeLimit: the early look of a create, before the plugin is
// asked; the registration checks again, in its transaction. It reads the
// volume's key and the count shards (index.go).
func (s *Store) CheckRoom(ctx context.Context, namespace, id string) error {
	ns, err := model.VolumeKey(namespace, id)
	if err != nil {
		return err
	}
	return s.call(ctx, "check the volume limit", func(ctx context.Context) error {
		resp, err := s.client.Txn(ctx).Then(
			clientv3.OpGet(s.keys.volume(ns, id), clientv3.WithCountOnly()),
			clientv3.OpGet(s.keys.volumeCounts(), clientv3.WithPrefix()),
		).Commit()
		if err != nil {
			return etcdErr(err)
		}
		if resp.Responses[0].GetResponseRange().GetCount() > 0 {
			return nil
		}
		got := map[string]*mvccpb.KeyValue{}
		for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
			got[string(kv.Key)] = kv
		}
		_, held, room, err := s.counts(got)
		if err == nil && len(room) == 0 {
			err = model.VolumeLimitError(ns, id, int(held))
		}
		return err
	})
}

// GetVolume returns a volume with its claims, its health following its
// plugin's counts over the live nodes, or model.ErrVolumeNotFound.
func (s *Store) GetVolume(ctx context.Context, namespace, id string) (*model.CSIVolume, error) {
	ns, err := model.VolumeKey(namespace, id)
	if err != nil {
		return nil, err
	}
	var v *model.CSIVolume
	err = s.call(ctx, "get volume", func(ctx context.Context) error {
		var err error
		v, _, err = s.readVolume(ctx, ns, id)
		return err
	})
	if err == nil && v == nil {
		err = model.NotFound(ns, id)
	}
	return v, err
}

// Release moves the claim of c.AllocID to c.State (ready-to-free, or
// empty, removes it) by the catalog's rules (model.ReleaseOn), in a
// transaction on the volume's record. Freeing a claim that is not held
// changes nothing.
func (s *Store) Release(ctx context.Context, namespace, id string, c *model.Claim) (*model.CSIVolume, error) {
	return s.changeClaims(ctx, "release", namespace, id, c, model.ReleaseOn, via{})
}

// Attach records a, the attachment of the volume to the node a.NodeID, by
// the catalog's rules (model.AttachOn), in a transaction on the volume's
// record: of two nodes attaching a single-node volume, whatever the
// interleaving, one wins and the other is refused.
func (s *Store) Attach(ctx context.Context, namespace, id string, a *model.Attachment) (*model.CSIVolume, error) {
	return s.changeVolume(ctx, "attach", namespace, id, func(v *model.CSIVolume) (*model.CSIVolume, error) { return model.AttachOn(v, a) })
}

// Detach removes the attachment of the volume to node (model.DetachOn),
// in a transaction on the volume's record. Removing one that is not there
// changes nothing.
func (s *Store) Detach(ctx context.Context, namespace, id, node string) (*model.CSIVolume, error) {
	return s.changeVolume(ctx, "detach", namespace, id, func(v *model.CSIVolume) (*model.CSIVolume, error) { return model.DetachOn(v, node) })
}

// MarkDetaching marks the attachment of the volume to node as being
// detached by this node (model.MarkDetachingOn), before
// ControllerUnpublishVolume: in a transaction that also holds only while
// node is down, so a node that comes back keeps its attachment, and, once
// marked, cannot attach the volume again until Detach.
func (s *Store) MarkDetaching(ctx context.Context, namespace, id, node string) (*model.CSIVolume, error) {
	if err := names.Check("node ID", node); err != nil {
		return nil, model.Refusef(model.ErrInvalid, "%v", err)
	}
	nodeKey := s.keys.node(node)
	nodeGone := clientv3.Compare(clientv3.CreateRevision(nodeKey), "=", 0)
	ns, err := model.VolumeKey(namespace, id)
	if err != nil {
		return nil, err
	}
	return s.update(ctx, "mark detaching", ns, id, func(v *model.CSIVolume) (*model.CSIVolume, error) {
		if v == nil {
			return nil, model.NotFound(ns, id)
		}
		up, err := s.client.Get(ctx, nodeKey, clientv3.WithCountOnly())
		if err != nil {
			return nil, etcdErr(err)
		}
		return model.MarkDetachingOn(v, node, up.Count > 0)
	}, func(context.Context, *model.CSIVolume) ([]clientv3.Cmp, error) { return []clientv3.Cmp{nodeGone}, nil })
}

func (s *Store) changeClaims(ctx context.Context, what, namespace, id string, c *model.Claim,
	rule func(*model.CSIVolume, *model.Claim) (*model.CSIVolume, error), how via) (*model.CSIVolume, error) {
	if c == nil {
		return nil, model.Refusef(model.ErrInvalid, "%s: claim must not be nil", what)
	}
	return s.changeVolumeVia(ctx, what, namespace, id, func(v *model.CSIVolume) (*model.CSIVolume, error) { return rule(v, c) }, how)
}

// decodeVolume decodes a volume record; one that does not decode, is
// invalid, or sits under another volume's key is corrupt.
func (s *Store) decodeVolume(kv *mvccpb.KeyValue) (*model.CSIVolume, error) {
	key := string(kv.Key)
	var m messages.CatalogVolume
	if err := s.decode(key, kv.Value, &m); err != nil {
		return nil, err
	}
	v := model.VolumeFromProto(&m)
	if err := v.Validate(); err != nil {
		return nil, corrupt(key, err)
	}
	if want := s.keys.volume(v.Namespace, v.ID); want != key {
		return nil, corrupt(key, fmt.Errorf("it holds volume %s/%s", v.Namespace, v.ID))
	}
	v.CreateIndex, v.ModifyIndex = uint64(kv.CreateRevision), uint64(kv.ModRevision)
	return v, nil
}

// DeregisterVolume forgets a volume, by the catalog's rules
// (model.DeregisterOf): one with claims is model.ErrVolumeInUse, an
// unknown one model.ErrVolumeNotFound.
func (s *Store) DeregisterVolume(ctx context.Context, namespace, id string) error {
	_, err := s.changeVolume(ctx, "deregister volume", namespace, id, func(v *model.CSIVolume) (*model.CSIVolume, error) {
		return nil, model.DeregisterOf(v)
	})
	return err
}

// MarkVolumeDeleting marks a volume as being deleted, by the catalog's
// rules (model.MarkDeletingOn), and returns it.
func (s *Store) MarkVolumeDeleting(ctx context.Context, namespace, id string) (*model.CSIVolume, error) {
	return s.changeVolume(ctx, "mark volume deleting", namespace, id, model.MarkDeletingOn)
}

// RecordVolumeCapacity records the capacity the plugin reported for a
// volume, by the catalog's rules (model.RecordCapacityOn), and returns it.
func (s *Store) RecordVolumeCapacity(ctx context.Context, namespace, id string, capacityBytes int64) (*model.CSIVolume, error) {
	return s.changeVolume(ctx, "record volume capacity", namespace, id, func(v *model.CSIVolume) (*model.CSIVolume, error) {
		return model.RecordCapacityOn(v, capacityBytes)
	})
}

// RecordVolumeModify merges the mutable parameters a ControllerModifyVolume
// set into the volume's, by the catalog's rule (model.RecordModifyOn), and
// returns it (model.ModifyFleet).
func (s *Store) RecordVolumeModify(ctx context.Context, namespace, id string, params map[string]string) (*model.CSIVolume, error) {
	return s.changeVolume(ctx, "record volume modify", namespace, id, func(v *model.CSIVolume) (*model.CSIVolume, error) {
		return model.RecordModifyOn(v, params)
	})
}

// ListVolumes returns the stubs of the volumes of namespace (all of them
// when empty), sorted by namespace, then ID, their health following their
// plugins' counts over the live nodes.
func (s *Store) ListVolumes(ctx context.Context, namespace string) ([]*model.CSIVolumeStub, error) {
	prefix := s.keys.volumes()
	if namespace != "" {
		if err := names.Check("namespace", namespace); err != nil {
			return nil, model.Refusef(model.ErrInvalid, "%v", err)
		}
		prefix = s.keys.namespace(namespace)
	}
	var out []*model.CSIVolumeStub
	err := s.call(ctx, "list volumes", func(ctx context.Context) error {
		resp, err := s.client.Txn(ctx).Then(
			clientv3.OpGet(prefix, clientv3.WithPrefix()),
			clientv3.OpGet(s.keys.fingerprints(), clientv3.WithPrefix()),
		).Commit()
		if err != nil {
			return etcdErr(err)
		}
		plugins, err := s.decodePlugins(resp.Responses[1].GetResponseRange().GetKvs(), false)
		if err != nil {
			return err
		}
		for _, kv := range resp.Responses[0].GetResponseRange().GetKvs() {
			v, err := s.decodeVolume(kv)
			if err != nil {
				return err
			}
			v.Health = model.HealthOf(v, plugins[v.PluginID])
			out = append(out, v.Stub())
		}
		return nil
	})
	return out, err
}

// changeVolume applies rule to a volume that must exist.
func (s *Store) changeVolume(ctx context.Context, what, namespace, id string,
	rule func(*model.CSIVolume) (*model.CSIVolume, error)) (*model.CSIVolume, error) {
	return s.changeVolumeVia(ctx, what, namespace, id, rule, via{})
}

// changeVolumeVia is changeVolume that reads as how says.
func (s *Store) changeVolumeVia(ctx context.Context, what, namespace, id string,
	rule func(*model.CSIVolume) (*model.CSIVolume, error), how via) (*model.CSIVolume, error) {
	ns, err := model.VolumeKey(namespace, id)
	if err != nil {
		return nil, err
	}
	return s.updateSeeing(ctx, what, ns, id, func(v *model.CSIVolume, _ sideRead) (*model.CSIVolume, error) {
		if v == nil {
			return nil, model.NotFound(ns, id)
		}
		return rule(v)
	}, nil, how)
}
