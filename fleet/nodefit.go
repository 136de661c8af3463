package fleet

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
)

// Claim applies c, a claim in state taken by the node c.NodeID, to the
// volume by the catalog's rules (model.ClaimOn), in a transaction on the
// volume's record: of two claims that exclude each other, whatever the
// interleaving, one wins and the other is refused. A claim that brings the
// volume to a node is also checked against that node's fingerprint of the
// volume's plugin (nodeFit): its topology and its max_volumes_per_node,
// counted from the node's claim index in the same transaction. A claim
// that is not held already, by an alloc of a draining node (see Drain), is
// refused (csi.ErrClaimRefused): the drain is read, and kept absent, in
// the claim's transaction. Claiming again what the alloc holds changes
// nothing and writes nothing.
func (s *Store) Claim(ctx context.Context, namespace, id string, c *model.Claim) (*model.CSIVolume, error) {
	return s.claimVia(ctx, namespace, id, c, nil)
}

// claimVia is Claim, starting from cache when it holds the volume.
func (s *Store) claimVia(ctx context.Context, namespace, id string, c *model.Claim, cache *VolumeCache) (*model.CSIVolume, error) {
	v, err := s.claim(ctx, namespace, id, c, cache)
	s.cfg.Metrics.Claimed(claimOutcome(err))
	return v, err
}

// claim reads the drain key of the claim's node with the record, in one
// round trip, and writes in a second one; from a cache, it writes in one.
func (s *Store) claim(ctx context.Context, namespace, id string, c *model.Claim, cache *VolumeCache) (*model.CSIVolume, error) {
	if c == nil {
		return nil, model.Refusef(model.ErrInvalid, "claim: claim must not be nil")
	}
	ns, err := model.VolumeKey(namespace, id)
	if err != nil {
		return nil, err
	}
	var guards []clientv3.Cmp // what this attempt read: the drain, the node fit
	return s.updateSeeing(ctx, "claim", ns, id, func(v *model.CSIVolume, seen sideRead) (*model.CSIVolume, error) {
		guards = nil
		if v == nil {
			return nil, model.NotFound(ns, id)
		}
		next, err := model.ClaimOn(v, c)
		if err != nil || next == v {
			return next, err
		}
		if guards, err = s.drainGuard(c.NodeID, seen); err != nil || v.ClaimedOn(c.NodeID) {
			return next, err
		}
		fit, err := s.nodeFit(ctx, v, c, seen)
		guards = append(guards, fit...)
		return next, err
	}, func(context.Context, *model.CSIVolume) ([]clientv3.Cmp, error) {
		return guards, nil
	}, via{cache: cache, drainOf: c.NodeID})
}

// nodeFit checks the claim against the fingerprint of v's node plugin on
// c.NodeID, from the plugin's fingerprints the attempt read (seen), and,
// when the plugin limits the node, how many volumes the node's claim index
// holds (model.NodeFitOn): a count-only read, and only a node at its
// limit has its index read with values, to count the volumes of v's plugin
// among them. It returns the compares that hold the claim's write to what
// it read: the fingerprint unchanged and, where the plugin limits the
// node, no claim index key of the node written since.
func (s *Store) nodeFit(ctx context.Context, v *model.CSIVolume, c *model.Claim, seen sideRead) ([]clientv3.Cmp, error) {
	fpKey := s.keys.pluginFingerprint(v.PluginID, c.NodeID, csi.TypeNode)
	guards := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(fpKey), "=", seen.modRevision(fpKey))}
	node := seen.plugin.NodeOn(c.NodeID)
	if node == nil || node.MaxVolumes == 0 {
		return guards, model.NodeFitOn(v, c, node, nil)
	}
	prefix := s.keys.claimsOf(c.NodeID)
	resp, err := s.client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return nil, etcdErr(err)
	}
	rev := resp.Header.Revision
	var onNode []string
	if resp.Count >= node.MaxVolumes {
		if onNode, rev, err = s.pluginClaimsOn(ctx, c.NodeID, v.PluginID); err != nil {
			return nil, err
		}
	}
	if err := model.NodeFitOn(v, c, node, onNode); err != nil {
		return nil, err
	}
	return append(guards, clientv3.Compare(clientv3.ModRevision(prefix), "<", rev+1).WithPrefix()), nil
}

// pluginClaimsOn are the volumes ("namespace/id") of plugin claimed on
// node, from the node's claim index, and the revision read. A key written
// before the index named plugins (its value empty) counts: it may be one.
func (s *Store) pluginClaimsOn(ctx context.Context, node, plugin string) ([]string, int64, error) {
	resp, err := s.client.Get(ctx, s.keys.claimsOf(node), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, etcdErr(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		_, ref, ok := s.indexEntry(s.keys.claims(), string(kv.Key), nil)
		if v, _, _ := parseClaimIndexValue(string(kv.Value)); ok && (v == plugin || v == "") {
			out = append(out, ref.ns+"/"+ref.id)
		}
	}
	return out, resp.Header.Revision, nil
}
