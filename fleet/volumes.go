package fleet

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/csi/catalog"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/names"
)

// RegisterVolume adds v or changes the description of a volume with no
// claims, by the catalog's rules (catalog.RegisterOver), and returns the
// volume as registered. Its indexes are etcd's revisions of the record.
func (s *Store) RegisterVolume(ctx context.Context, v *model.CSIVolume) (*model.CSIVolume, error) {
	if v == nil {
		return nil, catalog.FleetErrorf(catalog.ErrCatalogInvalid, "volume must not be nil")
	}
	ns, err := catalog.VolumeKey(v.Namespace, v.ID)
	if err != nil {
		return nil, err
	}
	out, err := s.update(ctx, "register volume", ns, v.ID, func(old *model.CSIVolume) (*model.CSIVolume, error) {
		return catalog.RegisterOver(old, v)
	}, nil)
	if err != nil {
		return nil, err
	}
	err = s.call(ctx, "read the plugin's health", func(ctx context.Context) error {
		var err error
		out.Health, err = s.pluginHealth(ctx, out.PluginID)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// pluginHealth is the health of the volumes of plugin, following its
// counts over the live nodes: what a registration answers with, since
// what it writes is the new description alone.
func (s *Store) pluginHealth(ctx context.Context, plugin string) (model.Health, error) {
	resp, err := s.client.Get(ctx, s.keys.pluginFingerprints(plugin), clientv3.WithPrefix())
	if err != nil {
		return model.Health{}, etcdErr(err)
	}
	plugins, err := s.decodePlugins(resp.Kvs, true)
	return model.PluginHealth(plugins[plugin]), err
}

// CheckRoom is nil when the volume (namespace, id) is in the fleet or the
// fleet holds fewer than Config.MaxVolumes volumes, else
// catalog.ErrVolumeLimit: the early look of a create, before the plugin is
// asked; the registration checks again, in its transaction. It reads the
// volume's key and the count shards (index.go).
func (s *Store) CheckRoom(ctx context.Context, namespace, id string) error {
	ns, err := catalog.VolumeKey(namespace, id)
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
			err = catalog.VolumeLimitError(ns, id, int(held))
		}
		return err
	})
}

// GetVolume returns a volume with its claims, its health following its
// plugin's counts over the live nodes, or catalog.ErrVolumeNotFound.
func (s *Store) GetVolume(ctx context.Context, namespace, id string) (*model.CSIVolume, error) {
	ns, err := catalog.VolumeKey(namespace, id)
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
		err = catalog.NotFound(ns, id)
	}
	return v, err
}

// Release moves the claim of c.AllocID to c.State (ready-to-free, or
// empty, removes it) by the catalog's rules (catalog.ReleaseOn), in a
// transaction on the volume's record. Freeing a claim that is not held
// changes nothing.
func (s *Store) Release(ctx context.Context, namespace, id string, c *model.Claim) (*model.CSIVolume, error) {
	return s.changeClaims(ctx, "release", namespace, id, c, catalog.ReleaseOn)
}

// Attach records a, the attachment of the volume to the node a.NodeID, by
// the catalog's rules (catalog.AttachOn), in a transaction on the volume's
// record: of two nodes attaching a single-node volume, whatever the
// interleaving, one wins and the other is refused.
func (s *Store) Attach(ctx context.Context, namespace, id string, a *model.Attachment) (*model.CSIVolume, error) {
	return s.changeVolume(ctx, "attach", namespace, id, func(v *model.CSIVolume) (*model.CSIVolume, error) { return catalog.AttachOn(v, a) })
}

// Detach removes the attachment of the volume to node (catalog.DetachOn),
// in a transaction on the volume's record. Removing one that is not there
// changes nothing.
func (s *Store) Detach(ctx context.Context, namespace, id, node string) (*model.CSIVolume, error) {
	return s.changeVolume(ctx, "detach", namespace, id, func(v *model.CSIVolume) (*model.CSIVolume, error) { return catalog.DetachOn(v, node) })
}

// MarkDetaching marks the attachment of the volume to node as being
// detached by this node (catalog.MarkDetachingOn), before
// ControllerUnpublishVolume: in a transaction that also holds only while
// node is down, so a node that comes back keeps its attachment, and, once
// marked, cannot attach the volume again until Detach.
func (s *Store) MarkDetaching(ctx context.Context, namespace, id, node string) (*model.CSIVolume, error) {
	if err := names.Check("node ID", node); err != nil {
		return nil, catalog.FleetErrorf(catalog.ErrCatalogInvalid, "%v", err)
	}
	nodeKey := s.keys.node(node)
	nodeGone := clientv3.Compare(clientv3.CreateRevision(nodeKey), "=", 0)
	ns, err := catalog.VolumeKey(namespace, id)
	if err != nil {
		return nil, err
	}
	return s.update(ctx, "mark detaching", ns, id, func(v *model.CSIVolume) (*model.CSIVolume, error) {
		if v == nil {
			return nil, catalog.NotFound(ns, id)
		}
		up, err := s.client.Get(ctx, nodeKey, clientv3.WithCountOnly())
		if err != nil {
			return nil, etcdErr(err)
		}
		return catalog.MarkDetachingOn(v, node, up.Count > 0)
	}, func(context.Context, *model.CSIVolume) ([]clientv3.Cmp, error) { return []clientv3.Cmp{nodeGone}, nil })
}

func (s *Store) changeClaims(ctx context.Context, what, namespace, id string, c *model.Claim,
	rule func(*model.CSIVolume, *model.Claim) (*model.CSIVolume, error)) (*model.CSIVolume, error) {
	if c == nil {
		return nil, catalog.FleetErrorf(catalog.ErrCatalogInvalid, "%s: claim must not be nil", what)
	}
	return s.changeVolume(ctx, what, namespace, id, func(v *model.CSIVolume) (*model.CSIVolume, error) { return rule(v, c) })
}

// update reads the volume (nil when absent) with its health, asks change
// for what to write (the same pointer: nothing; nil: delete), and writes it
// in a transaction that compares the record's mod revision with the one
// read, the index entries it reads (indexWrite) and the guards that
// guard, when given, returns for what is to be written. On a lost race it
// pauses a little (see backOff), reads again and retries, at most
// MaxAttempts times and within the request timeout; then it gives up with
// catalog.ErrCatalogStore, never catalog.ErrFleetUnavailable: etcd
// answered. It returns what it wrote, with etcd's revisions as indexes.
func (s *Store) update(ctx context.Context, what, ns, id string,
	change func(*model.CSIVolume) (*model.CSIVolume, error), guard guardFunc) (*model.CSIVolume, error) {
	return s.updateSeeing(ctx, what, ns, id, func(v *model.CSIVolume, _ pluginRead) (*model.CSIVolume, error) { return change(v) }, guard)
}

// updateSeeing is update whose change also sees the fingerprints of the
// volume's plugin as the attempt read them.
func (s *Store) updateSeeing(ctx context.Context, what, ns, id string,
	change func(*model.CSIVolume, pluginRead) (*model.CSIVolume, error), guard guardFunc) (*model.CSIVolume, error) {
	var out *model.CSIVolume
	err := s.call(ctx, what, func(ctx context.Context) error {
		for attempt := range s.cfg.MaxAttempts {
			if attempt > 0 && backOff(ctx, attempt) != nil {
				return s.lostRaces(what, ns, id, attempt)
			}
			won, err := s.attempt(ctx, ns, id, change, guard, &out)
			var u *unreached
			if attempt > 0 && errors.As(err, &u) && ctx.Err() != nil {
				// etcd answered the attempts before: the time went on
				// lost races, not on an etcd that is away.
				return s.lostRaces(what, ns, id, attempt)
			}
			if err != nil || won {
				return err
			}
		}
		return s.lostRaces(what, ns, id, s.cfg.MaxAttempts)
	})
	return out, err
}

// lostRaces is the error of a write that lost the race for its volume
// times times in a row, until its attempts or its time ran out.
func (s *Store) lostRaces(what, ns, id string, times int) error {
	return catalog.FleetErrorf(catalog.ErrCatalogStore,
		"fleet: %s of volume %s/%s lost the race to other writers %d times in a row (limits: %d attempts, Config.MaxAttempts, within %v, Config.RequestTimeout); try again",
		what, ns, id, times, s.cfg.MaxAttempts, s.cfg.RequestTimeout)
}

// attempt is one read, change and compare-and-write of update; it reports
// whether the write won (or nothing was to write), with *out set.
func (s *Store) attempt(ctx context.Context, ns, id string, change func(*model.CSIVolume, pluginRead) (*model.CSIVolume, error),
	guard guardFunc, out **model.CSIVolume) (bool, error) {
	key := s.keys.volume(ns, id)
	v, rev, seen, err := s.readVolumeSeeing(ctx, ns, id)
	if err != nil {
		return false, err
	}
	next, err := change(v, seen)
	if err != nil || next == v {
		*out = next
		return true, err
	}
	guards, writes, err := s.indexWrite(ctx, v, next)
	if err != nil {
		return false, err
	}
	if guard != nil && next != nil {
		more, err := guard(ctx, next)
		if err != nil {
			return false, err
		}
		guards = append(guards, more...)
	}
	write := clientv3.OpDelete(key)
	if next != nil {
		value, err := encodeRecord(key, next.Proto())
		if err != nil {
			return false, err
		}
		write = clientv3.OpPut(key, value)
	}
	ops := append(append(writes, write), s.indexOps(ns, id, v, next)...)
	resp, err := s.client.Txn(ctx).If(append(guards, clientv3.Compare(clientv3.ModRevision(key), "=", rev))...).Then(ops...).Commit()
	if err != nil || !resp.Succeeded {
		return false, etcdErr(err)
	}
	if next != nil {
		next = next.Copy()
		next.ModifyIndex = uint64(resp.Header.Revision)
		if v == nil {
			next.CreateIndex = next.ModifyIndex
		}
	}
	*out = next
	return true, nil
}

// guardFunc checks what is about to be written and returns the compares
// that must hold for the write.
type guardFunc func(ctx context.Context, next *model.CSIVolume) ([]clientv3.Cmp, error)

// maxBackOff bounds the pause between two attempts at a volume.
const maxBackOff = 50 * time.Millisecond

// backOff pauses before attempt (>0): a random time up
// to 2^attempt milliseconds, at most maxBackOff (full jitter), so that
// writers who keep colliding on one volume spread out.
func backOff(ctx context.Context, attempt int) error {
	return sleep(ctx, rand.N(min(time.Millisecond<<min(attempt, 16), maxBackOff)))
}

// readVolume reads a volume and the fingerprints of its plugin only
// (their copies under pluginfingerprints/<plugin>/), and returns the
// volume (nil when absent) with its health following its plugin's counts,
// and the record's mod revision (0 when absent). It reads the
// fingerprints of lastPlugin in the record's round trip; when the volume
// is another plugin's, it reads that plugin's just after: the health is
// the live nodes' now, and the write compares the record alone.
func (s *Store) readVolume(ctx context.Context, ns, id string) (*model.CSIVolume, int64, error) {
	v, rev, _, err := s.readVolumeSeeing(ctx, ns, id)
	return v, rev, err
}

// pluginRead is the volume's plugin as readVolumeSeeing read its
// fingerprints (nil when it has none), and the revision it read them at.
type pluginRead struct {
	plugin *model.CSIPlugin
	rev    int64
}

// readVolumeSeeing is readVolume that also returns what it read of the
// volume's plugin.
func (s *Store) readVolumeSeeing(ctx context.Context, ns, id string) (*model.CSIVolume, int64, pluginRead, error) {
	reads := []clientv3.Op{clientv3.OpGet(s.keys.volume(ns, id))}
	guess := s.lastPlugin.Load()
	if guess != nil {
		reads = append(reads, clientv3.OpGet(s.keys.pluginFingerprints(*guess), clientv3.WithPrefix()))
	}
	resp, err := s.client.Txn(ctx).Then(reads...).Commit()
	if err != nil {
		return nil, 0, pluginRead{}, etcdErr(err)
	}
	kv := firstKV(resp.Responses[0].GetResponseRange().GetKvs())
	if kv == nil {
		return nil, 0, pluginRead{}, nil
	}
	v, err := s.decodeVolume(kv)
	if err != nil {
		return nil, 0, pluginRead{}, err
	}
	var fps []*mvccpb.KeyValue
	seen := pluginRead{rev: resp.Header.Revision}
	if guess != nil && *guess == v.PluginID {
		fps = resp.Responses[1].GetResponseRange().GetKvs()
	} else {
		s.lastPlugin.Store(&v.PluginID)
		got, err := s.client.Get(ctx, s.keys.pluginFingerprints(v.PluginID), clientv3.WithPrefix())
		if err != nil {
			return nil, 0, pluginRead{}, etcdErr(err)
		}
		fps, seen.rev = got.Kvs, got.Header.Revision
	}
	plugins, err := s.decodePlugins(fps, true)
	if err != nil {
		return nil, 0, pluginRead{}, err
	}
	seen.plugin = plugins[v.PluginID]
	v.Health = model.HealthOf(v, seen.plugin)
	return v, kv.ModRevision, seen, nil
}

// decodeVolume decodes a volume record; one that does not decode, is
// invalid, or sits under another volume's key is corrupt.
func (s *Store) decodeVolume(kv *mvccpb.KeyValue) (*model.CSIVolume, error) {
	key := string(kv.Key)
	var m messages.CatalogVolume
	if err := decodeRecord(key, kv.Value, &m); err != nil {
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
// (catalog.DeregisterOf): one with claims is catalog.ErrVolumeInUse, an
// unknown one catalog.ErrVolumeNotFound.
func (s *Store) DeregisterVolume(ctx context.Context, namespace, id string) error {
	_, err := s.changeVolume(ctx, "deregister volume", namespace, id, func(v *model.CSIVolume) (*model.CSIVolume, error) {
		return nil, catalog.DeregisterOf(v)
	})
	return err
}

// MarkVolumeDeleting marks a volume as being deleted, by the catalog's
// rules (catalog.MarkDeletingOn), and returns it.
func (s *Store) MarkVolumeDeleting(ctx context.Context, namespace, id string) (*model.CSIVolume, error) {
	return s.changeVolume(ctx, "mark volume deleting", namespace, id, catalog.MarkDeletingOn)
}

// RecordVolumeCapacity records the capacity the plugin reported for a
// volume, by the catalog's rules (catalog.RecordCapacityOn), and returns it.
func (s *Store) RecordVolumeCapacity(ctx context.Context, namespace, id string, capacityBytes int64) (*model.CSIVolume, error) {
	return s.changeVolume(ctx, "record volume capacity", namespace, id, func(v *model.CSIVolume) (*model.CSIVolume, error) {
		return catalog.RecordCapacityOn(v, capacityBytes)
	})
}

// ListVolumes returns the stubs of the volumes of namespace (all of them
// when empty), sorted by namespace, then ID, their health following their
// plugins' counts over the live nodes.
func (s *Store) ListVolumes(ctx context.Context, namespace string) ([]*model.CSIVolumeStub, error) {
	prefix := s.keys.volumes()
	if namespace != "" {
		if err := names.Check("namespace", namespace); err != nil {
			return nil, catalog.FleetErrorf(catalog.ErrCatalogInvalid, "%v", err)
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
	ns, err := catalog.VolumeKey(namespace, id)
	if err != nil {
		return nil, err
	}
	return s.update(ctx, what, ns, id, func(v *model.CSIVolume) (*model.CSIVolume, error) {
		if v == nil {
			return nil, catalog.NotFound(ns, id)
		}
		return rule(v)
	}, nil)
}
