package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/names"
)

// The node index: keys with empty values, written in the same transaction
// as the volume record they follow (see indexOps), so that the GC and the
// Detacher find a node's claims and attachments by reading that node's
// keys, never every volume:
//   - claims/<node>/<ns>/<id>: node holds a claim (any state) on the volume;
//     its value is the volume's plugin, for the node's volume limit
//     (nodefit.go; keys written before are empty until reindex), then one
//     line for each alloc of the node holding a claim, sorted, so that the
//     node's watch of its index (watch.go) sees every change of its
//     allocs' claims (keys written before name no alloc);
//   - attachments/<node>/<ns>/<id>: the volume has an attachment to node.
//
// A leader of the GC checks them against the volumes once per term
// (reindex), which fills them in for volumes written before they existed,
// and names the plugin in claim keys written before their values did.
// A check that found every volume as it read it notes so in the key
// nodeindex (its value is when): from then on every volume write keeps
// the index, and the node list (Nodes), which reads the volumes through
// it, checks it only on a fleet that lacks that key.

func (k keys) claims() string                   { return k.prefix + "claims/" }
func (k keys) claimsOf(node string) string      { return k.claims() + node + "/" }
func (k keys) attachments() string              { return k.prefix + "attachments/" }
func (k keys) attachmentsOf(node string) string { return k.attachments() + node + "/" }
func (k keys) nodeIndexChecked() string         { return k.prefix + "nodeindex" }
func (k keys) indexed(of func(string) string, node, ns, id string) string {
	return of(node) + ns + "/" + id
}

// indexOps are the writes that keep the node index of volume ns/id right
// when old (nil: absent) becomes next (nil: deleted).
func (s *Store) indexOps(ns, id string, old, next *model.CSIVolume) []clientv3.Op {
	var ops []clientv3.Op
	for _, idx := range s.indexes() {
		before, after := idx.nodes(old), idx.nodes(next)
		for _, node := range slices.Sorted(maps.Keys(after)) {
			if value := idx.value(next, node); !before[node] || idx.value(old, node) != value {
				ops = append(ops, clientv3.OpPut(s.keys.indexed(idx.of, node, ns, id), value))
			}
		}
		for _, node := range slices.Sorted(maps.Keys(before)) {
			if !after[node] {
				ops = append(ops, clientv3.OpDelete(s.keys.indexed(idx.of, node, ns, id)))
			}
		}
	}
	return ops
}

// index is one family of the node index: where its keys are, its keys of
// a node, the nodes a volume puts in it and the value of a node's key.
type index struct {
	root  string
	of    func(node string) string
	nodes func(v *model.CSIVolume) map[string]bool
	value func(v *model.CSIVolume, node string) string
}

func (s *Store) indexes() []index { return []index{s.claimIndex(), s.attachmentIndex()} }

func (s *Store) claimIndex() index {
	return index{root: s.keys.claims(), of: s.keys.claimsOf, nodes: claimNodes, value: claimIndexValue}
}

func (s *Store) attachmentIndex() index {
	return index{root: s.keys.attachments(), of: s.keys.attachmentsOf, nodes: attachmentNodes, value: func(*model.CSIVolume, string) string { return "" }}
}

// claimIndexValue is the value of node's claim index key of v: v's plugin,
// then a line for each alloc of node holding a claim on v, sorted ("" when
// v is nil). Plugin names and alloc IDs hold no line break (names.Check).
func claimIndexValue(v *model.CSIVolume, node string) string {
	if v == nil {
		return ""
	}
	var allocs []string
	for _, c := range v.AllClaims() {
		if c.NodeID == node {
			allocs = append(allocs, c.AllocID)
		}
	}
	slices.Sort(allocs)
	return strings.Join(append([]string{v.PluginID}, allocs...), "\n")
}

// parseClaimIndexValue is the plugin and the allocs a claim index value
// names; known is false for a value written before the allocs were.
func parseClaimIndexValue(value string) (plugin string, allocs []string, known bool) {
	plugin, rest, known := strings.Cut(value, "\n")
	if known {
		allocs = strings.Split(rest, "\n")
	}
	return plugin, allocs, known
}

// claimNodes are the nodes that hold a claim on v (none when v is nil).
func claimNodes(v *model.CSIVolume) map[string]bool {
	nodes := map[string]bool{}
	if v != nil {
		for _, c := range v.AllClaims() {
			nodes[c.NodeID] = true
		}
	}
	return nodes
}

// attachmentNodes are the nodes v is attached to (none when v is nil).
func attachmentNodes(v *model.CSIVolume) map[string]bool {
	nodes := map[string]bool{}
	if v != nil {
		for node := range v.Attachments {
			nodes[node] = true
		}
	}
	return nodes
}

// volumeRef names a volume by namespace and ID.
type volumeRef struct{ ns, id string }

// parseIndexed is the node and the volume that key, an index key under
// root (root<node>/<namespace>/<id>, keys.indexed), names. A key of
// another shape, or whose parts are not good names, is malformed
// (malformedIndexKey).
func parseIndexed(root, key string) (string, volumeRef, error) {
	rest, ok := strings.CutPrefix(key, root)
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 3 {
		return "", volumeRef{}, malformedIndexKey(key, fmt.Errorf("an index key is %s<node>/<namespace>/<volume ID>", root))
	}
	err := names.Check("node ID", parts[0])
	if err == nil {
		_, err = model.VolumeKey(parts[1], parts[2])
	}
	if err != nil || parts[1] == "" {
		return "", volumeRef{}, malformedIndexKey(key, cmp.Or(err, errors.New("namespace: empty")))
	}
	return parts[0], volumeRef{parts[1], parts[2]}, nil
}

// malformedIndexKey is the error of a key in the node index that names no
// volume: it matches model.ErrCorrupt and names the key, what is wrong and
// the remedy. Such a key cannot name a stored volume, so the readers of
// the index skip it (indexEntry) and checkIndex deletes it.
func malformedIndexKey(key string, cause error) error {
	return fmt.Errorf("%w: etcd key %q in the node index: %w; it names no volume and is skipped: delete it "+
		"(etcdctl del %q), or let the index check delete it (it runs when a GC leader's term starts)",
		model.ErrCorrupt, key, cause, key)
}

// warnedKeys are the malformed keys of the node index that one pass over
// it has warned about (indexEntry): GC's Step reads a down node's keys
// twice, once for the list of nodes and once to free its claims, and warns
// once. nil remembers nothing: each read warns.
type warnedKeys map[string]bool

// first reports whether key is not in w yet, and puts it there.
func (w warnedKeys) first(key string) bool {
	if w[key] {
		return false
	}
	if w != nil {
		w[key] = true
	}
	return true
}

// indexEntry is parseIndexed of key under root; a malformed key is
// skipped (ok false) with a warning naming it and the remedy, unless
// warned has it already.
func (s *Store) indexEntry(root, key string, warned warnedKeys) (node string, ref volumeRef, ok bool) {
	node, ref, err := parseIndexed(root, key)
	if err != nil {
		if warned.first(key) {
			s.log.Warn("skipping a malformed key in the node index", "key", key, "error", err)
		}
		return "", volumeRef{}, false
	}
	return node, ref, true
}

// indexedVolumes are the volumes in node's keys of idx, read keys only;
// warned is indexEntry's.
func (s *Store) indexedVolumes(ctx context.Context, idx index, node string, warned warnedKeys) ([]volumeRef, error) {
	resp, err := s.client.Get(ctx, idx.of(node), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, etcdErr(err)
	}
	refs := make([]volumeRef, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if _, ref, ok := s.indexEntry(idx.root, string(kv.Key), warned); ok {
			refs = append(refs, ref)
		}
	}
	return refs, nil
}

// volumesAt reads the volumes under keys (sorted and made unique here) at
// revision rev, in transactions of indexBatch reads, and returns them in
// key order; a key with no volume at rev is passed over. A revision
// compacted since is rpctypes.ErrCompacted, unwrapped.
func (s *Store) volumesAt(ctx context.Context, keys []string, rev int64) ([]*model.CSIVolume, error) {
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	out := make([]*model.CSIVolume, 0, len(keys))
	for batch := range slices.Chunk(keys, indexBatch) {
		ops := make([]clientv3.Op, len(batch))
		for i, key := range batch {
			ops[i] = clientv3.OpGet(key, clientv3.WithRev(rev))
		}
		resp, err := s.client.Txn(ctx).Then(ops...).Commit()
		if errors.Is(err, rpctypes.ErrCompacted) {
			return nil, err
		}
		if err != nil {
			return nil, etcdErr(err)
		}
		for _, r := range resp.Responses {
			if kv := firstKV(r.GetResponseRange().GetKvs()); kv != nil {
				v, err := s.decodeVolume(kv)
				if err != nil {
					return nil, err
				}
				out = append(out, v)
			}
		}
	}
	return out, nil
}

// reindex makes the node index match the volumes (checkIndex). It reads
// every volume, so it runs once per term of the GC's leader.
func (s *Store) reindex(ctx context.Context) (fixed int, err error) {
	err = s.call(ctx, "check the node index", func(ctx context.Context) (err error) {
		fixed, _, err = s.checkIndex(ctx)
		return err
	})
	return fixed, err
}

// ensureNodeIndex checks the node index (checkIndex) until a check finds
// every volume as it read it, unless the index is noted as checked
// already: what a fleet written before the index needs once.
func (s *Store) ensureNodeIndex(ctx context.Context) error {
	for {
		resp, err := s.client.Get(ctx, s.keys.nodeIndexChecked(), clientv3.WithCountOnly())
		if err != nil || resp.Count > 0 {
			return etcdErr(err)
		}
		fixed, clean, err := s.checkIndex(ctx)
		if err != nil || clean {
			if err == nil {
				s.log.Info("checked the node index", "fixed", fixed)
			}
			return err
		}
	}
}

// checkIndex makes the node index match the volumes: the keys a volume
// wants and lacks are put, and those it does not want are deleted, each
// volume in a transaction that holds only while the volume is as read; a
// key that names no volume (parseIndexed) is deleted too.
// When every one held (clean), it notes the index as checked.
func (s *Store) checkIndex(ctx context.Context) (fixed int, clean bool, err error) {
	resp, err := s.client.Txn(ctx).Then(
		clientv3.OpGet(s.keys.volumes(), clientv3.WithPrefix()),
		clientv3.OpGet(s.keys.claims(), clientv3.WithPrefix()),
		clientv3.OpGet(s.keys.attachments(), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return 0, false, etcdErr(err)
	}
	have := map[string]map[string]string{} // volume key -> index keys present -> their values
	var malformed []*mvccpb.KeyValue
	for i, idx := range s.indexes() {
		for _, kv := range resp.Responses[i+1].GetResponseRange().GetKvs() {
			node, ref, err := parseIndexed(idx.root, string(kv.Key))
			if err != nil { // it names no volume: the check deletes it
				malformed = append(malformed, kv)
				continue
			}
			vk := s.keys.volume(ref.ns, ref.id)
			if have[vk] == nil {
				have[vk] = map[string]string{}
			}
			have[vk][s.keys.indexed(idx.of, node, ref.ns, ref.id)] = string(kv.Value)
		}
	}
	clean = true
	fix := func(guard clientv3.Cmp, ops []clientv3.Op) error {
		if len(ops) == 0 {
			return nil
		}
		done, err := s.client.Txn(ctx).If(guard).Then(ops...).Commit()
		if err != nil {
			return etcdErr(err)
		}
		fixed++
		clean = clean && done.Succeeded
		return nil
	}
	for _, kv := range resp.Responses[0].GetResponseRange().GetKvs() {
		v, err := s.decodeVolume(kv)
		if err != nil {
			return fixed, false, err
		}
		ops := s.indexFix(v, have[string(kv.Key)])
		delete(have, string(kv.Key))
		if err := fix(clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision), ops); err != nil {
			return fixed, false, err
		}
	}
	for _, kv := range malformed {
		s.log.Warn("deleting a malformed key from the node index", "key", string(kv.Key))
		if err := fix(clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision), []clientv3.Op{clientv3.OpDelete(string(kv.Key))}); err != nil {
			return fixed, false, err
		}
	}
	for vk, present := range have { // index keys of volumes that are gone
		if err := fix(clientv3.Compare(clientv3.CreateRevision(vk), "=", 0), s.indexFix(nil, present)); err != nil {
			return fixed, false, err
		}
	}
	if clean {
		_, err = s.client.Put(ctx, s.keys.nodeIndexChecked(), time.Now().UTC().Format(time.RFC3339Nano))
	}
	return fixed, clean, etcdErr(err)
}

// indexFix are the writes that turn the index keys present for v (nil:
// a volume that is gone), with their values, into those v wants: a claim
// key written before the index named plugins gets its volume's plugin.
func (s *Store) indexFix(v *model.CSIVolume, present map[string]string) []clientv3.Op {
	want := map[string]string{} // key -> value
	if v != nil {
		for _, idx := range s.indexes() {
			for node := range idx.nodes(v) {
				want[s.keys.indexed(idx.of, node, v.Namespace, v.ID)] = idx.value(v, node)
			}
		}
	}
	var ops []clientv3.Op
	for _, key := range slices.Sorted(maps.Keys(want)) {
		if value, ok := present[key]; !ok || value != want[key] {
			ops = append(ops, clientv3.OpPut(key, want[key]))
		}
	}
	for _, key := range slices.Sorted(maps.Keys(present)) {
		if _, ok := want[key]; !ok {
			ops = append(ops, clientv3.OpDelete(key))
		}
	}
	return ops
}

// indexedNodes are the nodes in the node index and those marked stranded,
// read keys only; warned is indexEntry's.
func (s *Store) indexedNodes(ctx context.Context, warned warnedKeys) (map[string]bool, error) {
	nodes := map[string]bool{}
	err := s.call(ctx, "read the node index", func(ctx context.Context) error {
		keysOnly := func(prefix string) clientv3.Op {
			return clientv3.OpGet(prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		}
		resp, err := s.client.Txn(ctx).Then(keysOnly(s.keys.claims()), keysOnly(s.keys.attachments()), keysOnly(s.keys.strandedMarks())).Commit()
		if err != nil {
			return etcdErr(err)
		}
		for i, idx := range s.indexes() {
			for _, kv := range resp.Responses[i].GetResponseRange().GetKvs() {
				if node, _, ok := s.indexEntry(idx.root, string(kv.Key), warned); ok {
					nodes[node] = true
				}
			}
		}
		for _, kv := range resp.Responses[2].GetResponseRange().GetKvs() {
			nodes[strings.TrimPrefix(string(kv.Key), s.keys.strandedMarks())] = true
		}
		return nil
	})
	return nodes, err
}

// nodeState is what the GC needs to know of a node.
type nodeState struct {
	up                  bool
	claims, attachments int64
	marked              bool
}

// nodeBatch bounds the nodes read in one transaction (etcd allows 128
// operations in one by default; a node takes 4).
const nodeBatch = 32

// nodeStates reads, for each node, whether it is up, how many volumes it
// holds claims on and is attached to, and whether it is marked stranded:
// count-only reads, a few per node.
func (s *Store) nodeStates(ctx context.Context, nodes []string) (map[string]nodeState, error) {
	states := make(map[string]nodeState, len(nodes))
	err := s.call(ctx, "read the nodes' state", func(ctx context.Context) error {
		for batch := range slices.Chunk(nodes, nodeBatch) {
			var ops []clientv3.Op
			for _, n := range batch {
				ops = append(ops,
					clientv3.OpGet(s.keys.node(n), clientv3.WithCountOnly()),
					clientv3.OpGet(s.keys.claimsOf(n), clientv3.WithPrefix(), clientv3.WithCountOnly()),
					clientv3.OpGet(s.keys.attachmentsOf(n), clientv3.WithPrefix(), clientv3.WithCountOnly()),
					clientv3.OpGet(s.keys.strandedMark(n), clientv3.WithCountOnly()))
			}
			resp, err := s.client.Txn(ctx).Then(ops...).Commit()
			if err != nil {
				return etcdErr(err)
			}
			count := func(i int) int64 { return resp.Responses[i].GetResponseRange().GetCount() }
			for i, n := range batch {
				states[n] = nodeState{up: count(4*i) > 0, claims: count(4*i + 1), attachments: count(4*i + 2), marked: count(4*i+3) > 0}
			}
		}
		return nil
	})
	return states, err
}
