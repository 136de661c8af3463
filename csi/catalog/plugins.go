package catalog

import (
	"context"
	"maps"
	"reflect"
	"slices"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
)

// This file holds the catalog's plugins beyond their fingerprints: the
// expected counts an agent outside a fleet declares (ExpectPlugin), and
// the collection of empty plugins.
//
// An empty plugin is forgotten by the write that empties it, as Nomad's
// state store does with CSIPlugin.IsEmpty: a plugin with no instance (an
// instance whose final fingerprint said it stopped, model.CSIInfo.Stopped,
// is none), no expectation and no volume is deleted from the catalog, its
// record with it. The writes that can empty one are a plugin instance's
// deregistration (its final fingerprint), a volume's deregistration (one or
// a batch), a registration that moves a volume to another plugin, and an
// expectation of 0/0. Start runs the same check over every plugin. A plugin
// with a volume is never forgotten.
//
// Nor is one whose allocation is being replaced. When a newer allocation
// takes over a plugin, the CSI manager marks the old instance's final
// fingerprint replaced_by the newer allocation, and holds it back until
// the new instance's first: the old record, healthy, stands until then,
// and the final word, late, is ignored (lateWord). When the new instance
// stops before it spoke, the final word comes first: until the new
// instance's own final word takes its place, that record counts as an
// instance. As in Nomad, where the plugin's job keeps it through a rolling
// update, the plugin is kept with its create index and with what its
// fingerprints said, above all that it requires a topology
// (VOLUME_ACCESSIBILITY_CONSTRAINTS): forgotten, a volume without one could
// be registered for it in that window. Remembering only the topology
// requirement would have left the plugin made again under a new create
// index; keeping every stopped record would have kept a deregistered
// plugin for ever. An allocation taking over that is deregistered before
// it spoke has its own final fingerprint take the record's place (lateWord
// lets it through), so the plugin goes as any other. A restart ends every
// take-over, since every instance fingerprints afresh after one: Start
// clears ReplacedBy on every restored record (distrustHealth). A new
// instance that cannot be reached at first, whose fingerprint learned no
// capabilities, keeps those of the record it replaces, marked as carried
// (model.CSIPlugin.AddPlugin), so the requirement holds until it answers.

// ExpectPlugin declares how many node and controller instances of plugin
// id this agent expects: its expected counts, kept in the plugin's record
// (a plugin not yet fingerprinted gets one) until declared again. Zero for
// both removes the expectation; a plugin left empty is then forgotten. A
// bad name or count is model.ErrInvalid naming the field, and changes nothing.
// In a fleet the expectation is the fleet's (fleet.Store.ExpectPlugin):
// model.ErrInvalid too. It returns the plugin after the change, or nil when it
// was forgotten or never known.
func (c *Catalog) ExpectPlugin(ctx context.Context, id string, nodes, controllers int) (*model.CSIPlugin, error) {
	if c.fleet != nil {
		return nil, model.Refusef(model.ErrInvalid, "plugin %q: in a fleet the expected counts are kept in the fleet's etcd, not by one node's catalog", id)
	}
	if err := model.CheckExpectation(id, nodes, controllers); err != nil {
		return nil, err
	}
	resp, err := catalogCall[*messages.ExpectPluginResponse](ctx, c, func(replyTo *actor.PID) proto.Message {
		return &messages.ExpectPlugin{PluginId: id, Nodes: int64(nodes), Controllers: int64(controllers), ReplyTo: replyTo}
	})
	if err != nil || resp.GetPlugin() == nil {
		return nil, err
	}
	return model.PluginFromProto(resp.GetPlugin())
}

func (a *catalogActor) applyExpect(cmd *messages.ExpectPlugin) (catalogChange, error) {
	var change catalogChange
	old := a.state.plugins[cmd.GetPluginId()]
	p := old.Copy()
	if p == nil {
		p = model.NewCSIPlugin(cmd.GetPluginId(), 0)
	}
	if err := p.Expect(int(cmd.GetNodes()), int(cmd.GetControllers())); err != nil {
		return change, err
	}
	if old == nil || !reflect.DeepEqual(old.Jobs, p.Jobs) {
		change.plugins = []*model.CSIPlugin{p}
	}
	return change, nil
}

// countVolume adds delta to the count of v's plugin's volumes; nil counts
// nothing.
func (s *catalogState) countVolume(v *model.CSIVolume, delta int) {
	if v == nil {
		return
	}
	if n := s.volumesOf[v.PluginID] + delta; n > 0 {
		s.volumesOf[v.PluginID] = n
	} else {
		delete(s.volumesOf, v.PluginID)
	}
}

// collect adds to c the plugins that c leaves empty (see the top of this
// file): of the plugins c puts, those of the volumes it moves or deletes,
// and, when c.sweep is set, every plugin of s. A plugin it forgets is no
// longer put.
func (c *catalogChange) collect(s *catalogState) {
	candidates := map[string]*model.CSIPlugin{}
	if c.sweep {
		maps.Copy(candidates, s.plugins)
	}
	volumes := maps.Clone(s.volumesOf)
	for key, v := range c.volumes {
		if old := s.volumes[key]; old != nil {
			volumes[old.PluginID]--
			candidates[old.PluginID] = s.plugins[old.PluginID]
		}
		if v != nil {
			volumes[v.PluginID]++
		}
	}
	for _, p := range c.plugins {
		candidates[p.ID] = p
	}
	for _, id := range slices.Sorted(maps.Keys(candidates)) {
		if p := candidates[id]; p != nil && volumes[id] <= 0 && len(p.Jobs) == 0 && !hasInstance(p) {
			c.plugins = slices.DeleteFunc(c.plugins, func(q *model.CSIPlugin) bool { return q.ID == id })
			if s.plugins[id] != nil {
				c.forget = append(c.forget, id)
			}
		}
	}
}

// hasInstance reports whether p has a controller or node instance that has
// not stopped, or that stopped for a newer allocation to take over
// (model.CSIInfo.ReplacedBy; a restart clears it, distrustHealth).
func hasInstance(p *model.CSIPlugin) bool {
	for _, entries := range []map[string]*model.CSIInfo{p.Controllers, p.Nodes} {
		for _, info := range entries {
			if !info.Stopped() || info.ReplacedBy != "" {
				return true
			}
		}
	}
	return false
}
