package fleet

import (
	"context"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/names"
)

// ControllerNode is a live node that runs a healthy controller instance
// of a plugin, and the address its cluster member listens on.
type ControllerNode struct {
	Node, Address string
}

// ControllerNodes returns the live nodes whose fingerprint of plugin's
// controller is healthy, sorted by node ID, each with its member's address
// from its liveness record: where a controller operation of the plugin can
// run. A node whose liveness record names no address (an agent of an
// earlier version) is left out. None is no error.
func (s *Store) ControllerNodes(ctx context.Context, plugin string) ([]ControllerNode, error) {
	if err := names.Check("plugin name", plugin); err != nil {
		return nil, model.Refusal(model.ErrInvalid, err)
	}
	var out []ControllerNode
	err := s.call(ctx, "find the nodes that run a plugin's controller", func(ctx context.Context) error {
		resp, err := s.client.Get(ctx, s.keys.pluginFingerprints(plugin), clientv3.WithPrefix())
		if err != nil {
			return etcdErr(err)
		}
		p, err := s.pluginOf(plugin, resp.Kvs)
		if err != nil || p == nil {
			return err
		}
		var gets []clientv3.Op
		for node, c := range p.Controllers {
			if c.Healthy {
				gets = append(gets, clientv3.OpGet(s.keys.node(node)))
			}
		}
		if len(gets) == 0 {
			return nil
		}
		nodes, err := s.client.Txn(ctx).Then(gets...).Commit()
		if err != nil {
			return etcdErr(err)
		}
		for _, r := range nodes.Responses {
			for _, kv := range r.GetResponseRange().Kvs {
				if h := s.decodeHolder(kv); h.rec.GetAddress() != "" {
					out = append(out, ControllerNode{Node: strings.TrimPrefix(string(kv.Key), s.keys.nodes()), Address: h.rec.GetAddress()})
				}
			}
		}
		return nil
	})
	slices.SortFunc(out, func(a, b ControllerNode) int { return strings.Compare(a.Node, b.Node) })
	return out, err
}
