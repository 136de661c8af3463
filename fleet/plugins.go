package fleet

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/names"
)

// Plugin returns plugin name as the whole fleet sees it: the fingerprints
// of its instances on every live node (read under its own prefix,
// pluginfingerprints/<name>/, never the other plugins'), its healthy
// counts over them, and its expected counts from the expectation
// ExpectPlugin stored. A plugin that no live node fingerprints and no
// expectation names is model.ErrPluginNotFound.
func (s *Store) Plugin(ctx context.Context, name string) (*model.CSIPlugin, error) {
	if err := names.Check("plugin name", name); err != nil {
		return nil, model.Refusal(model.ErrInvalid, err)
	}
	var out *model.CSIPlugin
	err := s.call(ctx, "read a plugin", func(ctx context.Context) error {
		resp, err := s.client.Txn(ctx).Then(
			clientv3.OpGet(s.keys.pluginFingerprints(name), clientv3.WithPrefix()),
			clientv3.OpGet(s.keys.pluginExpect(name)),
		).Commit()
		if err != nil {
			return etcdErr(err)
		}
		plugins, err := s.decodePlugins(resp.Responses[0].GetResponseRange().Kvs, true)
		if err != nil {
			return err
		}
		out = plugins[name]
		if out == nil {
			out = model.NewCSIPlugin(name, 0)
		}
		for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
			if err := s.addExpectation(out, string(kv.Key), kv.Value); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if out.IsEmpty() {
		return nil, model.Refusef(model.ErrPluginNotFound,
			"plugin %q: no live node fingerprints it and no expectation names it (plugvisor plugin expect)", name)
	}
	return out, nil
}

// addExpectation sets the jobs of the expectation stored under key on p.
func (s *Store) addExpectation(p *model.CSIPlugin, key string, value []byte) error {
	var m messages.CatalogPlugin
	if err := s.decode(key, value, &m); err != nil {
		return err
	}
	if m.GetId() != p.ID {
		return corrupt(key, fmt.Errorf("it holds the expectation of plugin %q", m.GetId()))
	}
	for id, j := range m.GetJobs() {
		if err := p.SetJob(model.PluginJob{ID: id, Type: model.PluginType(j.GetType()), Expected: int(j.GetExpected())}); err != nil {
			return corrupt(key, err)
		}
	}
	return nil
}

// ExpectPlugin declares how many node and controller instances of plugin
// name the fleet should run: the plugin's expected counts, kept under its
// own key (pluginexpect/<name>, no lease: it outlives every node) until
// declared again. Zero for both removes the expectation, so nothing empty
// is ever stored: a plugin without an expectation lives only in its
// instances' fingerprints, which go with their nodes' leases. A bad name
// or a count below 0 or above model.MaxExpected is model.ErrInvalid, naming
// the field; nothing changed. It returns the plugin as Plugin reads it
// after the change, or nil when nothing names it any more.
func (s *Store) ExpectPlugin(ctx context.Context, name string, nodes, controllers int) (*model.CSIPlugin, error) {
	expected := model.NewCSIPlugin(name, 0)
	if err := expected.Expect(nodes, controllers); err != nil {
		return nil, err
	}
	key := s.keys.pluginExpect(name)
	op := clientv3.OpDelete(key)
	if len(expected.Jobs) > 0 {
		value, err := s.codec.encode(key, &messages.CatalogPlugin{Id: name, Jobs: expected.Proto().GetJobs()})
		if err != nil {
			return nil, err
		}
		op = clientv3.OpPut(key, value)
	}
	err := s.call(ctx, "declare a plugin's expected counts", func(ctx context.Context) error {
		wctx, failed := sending(ctx)
		_, err := s.client.Txn(wctx).Then(op).Commit()
		return failed(err)
	})
	if err != nil {
		return nil, err
	}
	p, err := s.Plugin(ctx, name)
	if errors.Is(err, model.ErrPluginNotFound) {
		return nil, nil
	}
	return p, err
}

// registeredPlugins reads, once per plugin, the fingerprints of the
// plugins of vs over every live node (under each plugin's own prefix):
// what a registration checks the topology requirement against
// (model.TopologyRefusal: the registering node need not run the plugin) and
// answers its health from. A plugin no live node fingerprints is absent.
// The fingerprints are read before the registration's transaction, not in
// it: a plugin's first fingerprint that lands during a registration may
// miss it, as it would a moment earlier.
func (s *Store) registeredPlugins(ctx context.Context, vs []*model.CSIVolume) (map[string]*model.CSIPlugin, error) {
	plugins := map[string]*model.CSIPlugin{}
	err := s.call(ctx, "read the plugins' fingerprints", func(ctx context.Context) error {
		for _, v := range vs {
			if _, read := plugins[v.PluginID]; read {
				continue
			}
			resp, err := s.client.Get(ctx, s.keys.pluginFingerprints(v.PluginID), clientv3.WithPrefix())
			if err != nil {
				return etcdErr(err)
			}
			if plugins[v.PluginID], err = s.pluginOf(v.PluginID, resp.Kvs); err != nil {
				return err
			}
		}
		return nil
	})
	return plugins, err
}
