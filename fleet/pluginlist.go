package fleet

import (
	"context"
	"maps"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
)

// ListPlugins returns every plugin a live node fingerprints or an
// expectation names, sorted by ID, each as Plugin returns one: the
// fingerprints of its instances (keyed by node), its healthy counts over
// the live nodes, and its expected counts. It reads the fingerprints and
// the expectations in one transaction, so the counts are of one revision.
func (s *Store) ListPlugins(ctx context.Context) ([]*model.CSIPlugin, error) {
	var plugins map[string]*model.CSIPlugin
	err := s.call(ctx, "list plugins", func(ctx context.Context) error {
		resp, err := s.client.Txn(ctx).Then(
			clientv3.OpGet(s.keys.fingerprints(), clientv3.WithPrefix()),
			clientv3.OpGet(s.keys.pluginExpect(""), clientv3.WithPrefix()),
		).Commit()
		if err != nil {
			return etcdErr(err)
		}
		if plugins, err = s.decodePlugins(resp.Responses[0].GetResponseRange().Kvs, false); err != nil {
			return err
		}
		if plugins == nil {
			plugins = map[string]*model.CSIPlugin{}
		}
		for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
			key := string(kv.Key)
			name := strings.TrimPrefix(key, s.keys.pluginExpect(""))
			if plugins[name] == nil {
				plugins[name] = model.NewCSIPlugin(name, 0)
			}
			if err := s.addExpectation(plugins[name], key, kv.Value); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return sortedPlugins(plugins), nil
}

// sortedPlugins are the plugins, sorted by ID.
func sortedPlugins(plugins map[string]*model.CSIPlugin) []*model.CSIPlugin {
	out := make([]*model.CSIPlugin, 0, len(plugins))
	for _, id := range slices.Sorted(maps.Keys(plugins)) {
		out = append(out, plugins[id])
	}
	return out
}
