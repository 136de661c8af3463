package fleet

import (
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

// Node is a node of the fleet, as Nodes lists it.
type Node struct {
	ID string
	// Up: the node's liveness key is there, under its lease.
	Up bool
	// Lease is the node's lease (0 while down), LeaseTTL what is left of
	// it, and Joined when the node last put its liveness key.
	Lease    int64
	LeaseTTL time.Duration
	Joined   time.Time
	// DrainingSince is when a drain of the node began; zero while it is
	// eligible for new claims.
	DrainingSince time.Time
	// Claims are the claims of the node's allocs, held or being released;
	// Attachments are the volumes attached to the node. Both are sorted
	// by volume, then alloc.
	Claims      []NodeClaim
	Attachments []NodeAttachment
}

// NodeClaim is a claim of an alloc of a node on a volume.
type NodeClaim struct {
	Namespace, VolumeID, AllocID string
	Mode                         model.ClaimMode
	State                        model.ClaimState
}

// NodeAttachment is the attachment of a volume to a node.
type NodeAttachment struct {
	Namespace, VolumeID, ExternalNodeID string
	State                               model.AttachmentState
}

// Nodes lists, sorted by ID, every node the fleet knows at one revision:
// the nodes up, the nodes draining, and the nodes holding a claim or an
// attachment. It reads the nodes' keys and the node index (nodeindex.go),
// then only the volumes the index names: its cost follows the nodes and
// their claims and attachments, not the number of volumes. On a fleet
// whose index was never checked against the volumes (one written before
// the index), the first call checks it, once for the fleet.
func (s *Store) Nodes(ctx context.Context) ([]*Node, error) {
	var out []*Node
	err := s.call(ctx, "list nodes", func(ctx context.Context) error {
		nodes, err := s.readNodes(ctx)
		if err != nil {
			return err
		}
		for _, id := range slices.Sorted(maps.Keys(nodes)) {
			n := nodes[id]
			if n.Lease != 0 {
				ttl, err := s.client.TimeToLive(ctx, clientv3.LeaseID(n.Lease))
				if err != nil {
					return etcdErr(err)
				}
				n.LeaseTTL = time.Duration(max(ttl.TTL, 0)) * time.Second
			}
			out = append(out, n)
		}
		return nil
	})
	return out, err
}

// readNodes reads the liveness keys, the drains and the node index at one
// revision, then the volumes the index names at that revision, and
// returns the nodes they name. A fleet whose index is not noted as
// checked has it checked first; a revision compacted in between the two
// reads is read again at a newer one.
func (s *Store) readNodes(ctx context.Context) (map[string]*Node, error) {
	for {
		resp, err := s.client.Txn(ctx).Then(
			clientv3.OpGet(s.keys.nodes(), clientv3.WithPrefix()),
			clientv3.OpGet(s.keys.drains(), clientv3.WithPrefix()),
			clientv3.OpGet(s.keys.claims(), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
			clientv3.OpGet(s.keys.attachments(), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
			clientv3.OpGet(s.keys.nodeIndexChecked(), clientv3.WithCountOnly()),
		).Commit()
		if err != nil {
			return nil, etcdErr(err)
		}
		if resp.Responses[4].GetResponseRange().GetCount() == 0 {
			if err := s.ensureNodeIndex(ctx); err != nil {
				return nil, err
			}
			continue
		}
		var held []string // the keys of the volumes the index names
		for i, idx := range s.indexes() {
			for _, kv := range resp.Responses[i+2].GetResponseRange().GetKvs() {
				if _, ref, ok := s.indexEntry(idx.root, string(kv.Key), nil); ok {
					held = append(held, s.keys.volume(ref.ns, ref.id))
				}
			}
		}
		volumes, err := s.volumesAt(ctx, held, resp.Header.Revision)
		if errors.Is(err, rpctypes.ErrCompacted) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return s.nodesOf(resp.Responses[0].GetResponseRange().GetKvs(), resp.Responses[1].GetResponseRange().GetKvs(), volumes), nil
	}
}

// nodesOf are the nodes that the liveness keys, the drain keys and the
// volumes name.
func (s *Store) nodesOf(live, drains []*mvccpb.KeyValue, volumes []*model.CSIVolume) map[string]*Node {
	nodes := map[string]*Node{}
	node := func(id string) *Node {
		if nodes[id] == nil {
			nodes[id] = &Node{ID: id}
		}
		return nodes[id]
	}
	for _, kv := range live {
		n := node(strings.TrimPrefix(string(kv.Key), s.keys.nodes()))
		n.Up, n.Lease = true, kv.Lease
		n.Joined = s.decodeHolder(kv).joined(kv.Value)
	}
	for _, kv := range drains {
		node(strings.TrimPrefix(string(kv.Key), s.keys.drains())).DrainingSince = drainedSince(kv.Value)
	}
	for _, v := range volumes {
		for _, c := range v.AllClaims() {
			n := node(c.NodeID)
			n.Claims = append(n.Claims, NodeClaim{Namespace: v.Namespace, VolumeID: v.ID, AllocID: c.AllocID, Mode: c.Mode, State: c.State})
		}
		for _, id := range slices.Sorted(maps.Keys(v.Attachments)) {
			a := v.Attachments[id]
			n := node(id)
			n.Attachments = append(n.Attachments, NodeAttachment{Namespace: v.Namespace, VolumeID: v.ID, ExternalNodeID: a.ExternalNodeID, State: a.State})
		}
	}
	return nodes
}

// drainedSince is the start of a drain, as its key's value holds it.
func drainedSince(value []byte) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, string(value))
	return t
}

// Drain makes node ineligible for new claims: from the moment Drain
// returns, every claim by an alloc of node that is not held already is
// refused (csi.ErrClaimRefused), in the claim's own transaction; releases
// go on as before. It returns the node as Nodes would list it. A node the
// fleet does not know is model.ErrNodeNotFound, one draining already
// model.ErrNodeDraining; Undrain ends the drain.
func (s *Store) Drain(ctx context.Context, node string) (*Node, error) {
	if err := names.Check("node ID", node); err != nil {
		return nil, model.Refusef(model.ErrInvalid, "drain: %v", err)
	}
	var out *Node
	err := s.call(ctx, "drain a node", func(ctx context.Context) error {
		nodes, err := s.readNodes(ctx)
		if err != nil {
			return err
		}
		out = nodes[node]
		switch {
		case out == nil:
			return nodeNotFound(node, nodes)
		case !out.DrainingSince.IsZero():
			return drainingError(node, out.DrainingSince)
		}
		key, now := s.keys.drain(node), time.Now().UTC()
		wctx, failed := sending(ctx)
		resp, err := s.client.Txn(wctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, now.Format(time.RFC3339Nano))).Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			return failed(err)
		}
		if !resp.Succeeded {
			since := time.Time{}
			if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
				since = drainedSince(kvs[0].Value)
			}
			return drainingError(node, since)
		}
		out.DrainingSince = now
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.log.Info("draining a node: new claims on it are refused", "node", node)
	return out, nil
}

// Undrain makes node eligible for new claims again, and reports whether
// it was draining (a node that was not stays as it is). A node the fleet
// does not know is model.ErrNodeNotFound.
func (s *Store) Undrain(ctx context.Context, node string) (bool, error) {
	if err := names.Check("node ID", node); err != nil {
		return false, model.Refusef(model.ErrInvalid, "eligibility: %v", err)
	}
	var deleted bool
	err := s.call(ctx, "end a node's drain", func(ctx context.Context) error {
		wctx, failed := sending(ctx)
		resp, err := s.client.Delete(wctx, s.keys.drain(node))
		if err != nil {
			return failed(err)
		}
		if deleted = resp.Deleted > 0; deleted {
			return nil
		}
		nodes, err := s.readNodes(ctx)
		if err == nil && nodes[node] == nil {
			err = nodeNotFound(node, nodes)
		}
		return err
	})
	if deleted {
		s.log.Info("a node is eligible again: it takes new claims", "node", node)
	}
	return deleted, err
}

// FreeNodeClaims frees every claim of node's allocs, held or being
// released, on every volume, as the GC frees a dead node's: what a drain
// with -force does once its deadline has passed. The node must be
// draining (model.ErrNodeDraining otherwise), in each volume's transaction. It
// returns the claims it freed.
func (s *Store) FreeNodeClaims(ctx context.Context, node string) ([]Freed, error) {
	if err := names.Check("node ID", node); err != nil {
		return nil, model.Refusef(model.ErrInvalid, "free claims: %v", err)
	}
	var nodes map[string]*Node
	if err := s.call(ctx, "list nodes", func(ctx context.Context) (err error) { nodes, err = s.readNodes(ctx); return err }); err != nil {
		return nil, err
	}
	n := nodes[node]
	if n == nil || n.DrainingSince.IsZero() {
		return nil, fmt.Errorf("%w: node %q is not draining: drain it first (plugvisor node drain %s)", model.ErrNodeDraining, node, node)
	}
	draining := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(s.keys.drain(node)), ">", 0)}
	var out []Freed
	seen := map[[2]string]bool{}
	for _, c := range n.Claims {
		if seen[[2]string{c.Namespace, c.VolumeID}] {
			continue
		}
		seen[[2]string{c.Namespace, c.VolumeID}] = true
		var freed []Freed
		_, err := s.update(ctx, "free the claims of a drained node", c.Namespace, c.VolumeID, func(v *model.CSIVolume) (*model.CSIVolume, error) {
			var changed *model.CSIVolume
			changed, freed = freeClaimsOf(v, node)
			return changed, nil
		}, func(context.Context, *model.CSIVolume) ([]clientv3.Cmp, error) { return draining, nil })
		if err != nil {
			return out, partlyFreed(node, out, err)
		}
		out = append(out, freed...)
	}
	for _, f := range out {
		s.log.Warn("freed the claim of an alloc of a drained node past its deadline", "namespace", f.Namespace, "volume", f.VolumeID,
			"alloc", f.AllocID, "node", node)
	}
	return out, nil
}

// partlyFreed is err, the failure of a forced free of node's claims, once
// it had freed the claims freed: it names them, so that an operator does
// not take the failure for nothing done. Freeing again frees the others.
func partlyFreed(node string, freed []Freed, err error) error {
	if len(freed) == 0 {
		return err
	}
	names := make([]string, len(freed))
	for i, f := range freed {
		names[i] = fmt.Sprintf("%s on %s/%s", f.AllocID, f.Namespace, f.VolumeID)
	}
	claims := "claims"
	if len(freed) == 1 {
		claims = "claim"
	}
	return fmt.Errorf("freed %d %s of node %s's allocs before it failed: %s; the others stay held until the claims are freed again: %w",
		len(freed), claims, node, strings.Join(names, ", "), err)
}

// nodeNotFound is the error of a node command naming a node the fleet
// does not know; it names the nodes it knows.
func nodeNotFound(node string, nodes map[string]*Node) error {
	known := "none"
	if len(nodes) > 0 {
		known = strings.Join(slices.Sorted(maps.Keys(nodes)), ", ")
	}
	return fmt.Errorf("%w: node: the fleet knows no node %q (known: %s); see plugvisor node list", model.ErrNodeNotFound, node, known)
}

// drainingError is the refusal of a drain of a node draining since since.
func drainingError(node string, since time.Time) error {
	return fmt.Errorf("%w: node: %q is already draining (since %s): nothing changed; plugvisor node eligibility -enable %s ends the drain",
		model.ErrNodeDraining, node, since.Format(time.RFC3339), node)
}

// drainGuard refuses a claim on node when the attempt read node's drain
// key (seen) and found it, and returns the compare that keeps the drain
// absent until the claim's write: a drain that begins in between (or
// since the cache the attempt started from) makes the write lose, and its
// next attempt, on what the losing transaction read, sees the drain and
// refuses.
func (s *Store) drainGuard(node string, seen sideRead) ([]clientv3.Cmp, error) {
	if seen.drainRead && seen.drain != nil {
		return nil, model.DrainRefusal(node, drainedSince(seen.drain.Value))
	}
	return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(s.keys.drain(node)), "=", 0)}, nil
}

// freeClaimsOf frees every claim of node's allocs on v: it returns the
// volume to write (v itself when none was there; nil for nil) and the
// claims freed.
func freeClaimsOf(v *model.CSIVolume, node string) (*model.CSIVolume, []Freed) {
	if v == nil {
		return nil, nil
	}
	var freed []Freed
	changed := v.Copy()
	for _, c := range v.AllClaims() {
		if c.NodeID == node && changed.GC(c.AllocID) {
			freed = append(freed, Freed{Namespace: v.Namespace, VolumeID: v.ID, AllocID: c.AllocID, NodeID: node})
		}
	}
	if len(freed) == 0 {
		return v, nil
	}
	return changed, freed
}
