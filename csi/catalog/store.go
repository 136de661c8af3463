package catalog

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/storage"
)

// Bucket is the storage bucket the agent gives the catalog, in the
// same file as the registry's.
const Bucket = "csi.catalog"

// Keys of the catalog's records: "index", "plugin/<id>" and
// "volume/<namespace>/<id>". IDs and namespaces never hold a "/"
// (names.Check), so the keys cannot collide.
const (
	catalogIndexKey     = "index"
	catalogPluginPrefix = "plugin/"
	catalogVolumePrefix = "volume/"
)

// restoredDescription is the health description the catalog gives, at
// start, each fingerprint it restored as healthy.
const restoredDescription = "restored at start; waiting for this agent's CSI manager to fingerprint the plugin again"

// volumeKey identifies a volume: its namespace and ID.
type volumeKey struct{ namespace, id string }

func (k volumeKey) String() string { return k.namespace + "/" + k.id }

func (k volumeKey) storageKey() string { return catalogVolumePrefix + k.String() }

func compareVolumeKeys(a, b volumeKey) int {
	return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.id, b.id))
}

// catalogVolumeKey checks a namespace (empty means the default one) and a
// volume ID, and returns them as a key.
func catalogVolumeKey(namespace, id string) (volumeKey, error) {
	namespace, err := model.VolumeKey(namespace, id)
	if err != nil {
		return volumeKey{}, err
	}
	return volumeKey{namespace, id}, nil
}

// catalogState is the catalog's model: volumes, plugins and the last index
// handed out. Its volumes and plugins are never changed in place: a change
// puts a changed copy in place of the old value, so a clone of the maps is
// a snapshot that later changes do not touch.
type catalogState struct {
	volumes map[volumeKey]*model.CSIVolume
	plugins map[string]*model.CSIPlugin
	// volumesOf counts the volumes of each plugin that has any.
	volumesOf map[string]int
	index     uint64
}

func newCatalogState() *catalogState {
	return &catalogState{volumes: map[volumeKey]*model.CSIVolume{}, plugins: map[string]*model.CSIPlugin{}, volumesOf: map[string]int{}}
}

// clone returns a snapshot of s in O(volumes + plugins), sharing the values.
func (s *catalogState) clone() *catalogState {
	return &catalogState{volumes: maps.Clone(s.volumes), plugins: maps.Clone(s.plugins), volumesOf: maps.Clone(s.volumesOf), index: s.index}
}

// volume returns the volume under key, or an error matching model.ErrVolumeNotFound.
func (s *catalogState) volume(key volumeKey) (*model.CSIVolume, error) {
	if v, ok := s.volumes[key]; ok {
		return v, nil
	}
	return nil, model.Refusef(model.ErrVolumeNotFound, "no volume %q in namespace %q", key.id, key.namespace)
}

// checkRoom refuses a new volume under key once s holds limit volumes; a
// volume already in s is never refused.
func (s *catalogState) checkRoom(key volumeKey, limit int) error {
	if _, ok := s.volumes[key]; ok || len(s.volumes) < limit {
		return nil
	}
	return model.VolumeLimitError(key.namespace, key.id, len(s.volumes))
}

// sortedVolumeKeys returns the keys of s's volumes by namespace, then ID.
func (s *catalogState) sortedVolumeKeys() []volumeKey {
	return slices.SortedFunc(maps.Keys(s.volumes), compareVolumeKeys)
}

// catalogChange is what one write changes: the volumes to put (or, when
// nil, to delete), the plugins to put and the plugins to forget. Its values
// are fresh copies that commit may stamp.
type catalogChange struct {
	volumes map[volumeKey]*model.CSIVolume
	plugins []*model.CSIPlugin
	forget  []string
	// sweep has commit look at every plugin for one to forget, not only
	// at those the change touches: Start's change.
	sweep bool
}

func (c *catalogChange) putVolume(key volumeKey, v *model.CSIVolume) {
	if c.volumes == nil {
		c.volumes = map[volumeKey]*model.CSIVolume{}
	}
	c.volumes[key] = v
}

// followHealth adds to c every volume of s whose health differs from what
// its plugin says, the plugin as c leaves it.
func (c *catalogChange) followHealth(s *catalogState) {
	for _, key := range s.sortedVolumeKeys() {
		v := s.volumes[key]
		p := s.plugins[v.PluginID]
		if i := slices.IndexFunc(c.plugins, func(p *model.CSIPlugin) bool { return p.ID == v.PluginID }); i >= 0 {
			p = c.plugins[i]
		}
		if want := model.PluginHealth(p); v.Health != want {
			changed := v.Copy()
			changed.Health = want
			c.putVolume(key, changed)
		}
	}
}

// commit applies c to s under a new index: what c creates gets it as its
// CreateIndex, everything it changes as its ModifyIndex. It returns the
// storage ops of c, without the index record (the batch adds that once). A
// record that does not encode (a string that is not UTF-8) refuses the
// whole change with model.ErrInvalid and leaves s unchanged. An empty
// change does nothing.
func (s *catalogState) commit(c catalogChange) ([]storage.Op, error) {
	c.collect(s)
	if len(c.volumes) == 0 && len(c.plugins) == 0 && len(c.forget) == 0 {
		return nil, nil
	}
	index := s.index + 1
	var ops []storage.Op
	for _, id := range c.forget {
		ops = append(ops, storage.Delete([]byte(catalogPluginPrefix+id)))
	}
	for _, p := range c.plugins {
		p.CreateIndex, p.ModifyIndex = cmp.Or(p.CreateIndex, index), index
		op, err := catalogRecord(catalogPluginPrefix+p.ID, p.Proto())
		if err != nil {
			return nil, err
		}
		ops = append(ops, op)
	}
	for _, key := range slices.SortedFunc(maps.Keys(c.volumes), compareVolumeKeys) {
		v := c.volumes[key]
		if v == nil {
			ops = append(ops, storage.Delete([]byte(key.storageKey())))
			continue
		}
		v.CreateIndex, v.ModifyIndex = cmp.Or(v.CreateIndex, index), index
		op, err := catalogRecord(key.storageKey(), v.Proto())
		if err != nil {
			return nil, err
		}
		ops = append(ops, op)
	}
	s.index = index
	for _, p := range c.plugins {
		s.plugins[p.ID] = p
	}
	for _, id := range c.forget {
		delete(s.plugins, id)
	}
	for key, v := range c.volumes {
		s.countVolume(s.volumes[key], -1)
		s.countVolume(v, 1)
		if v == nil {
			delete(s.volumes, key)
		} else {
			s.volumes[key] = v
		}
	}
	return ops, nil
}

// catalogRecord encodes m as the record under key.
func catalogRecord(key string, m proto.Message) (storage.Op, error) {
	value, err := proto.Marshal(m)
	if err != nil {
		return storage.Op{}, model.Refusef(model.ErrInvalid, "%s cannot be stored: %v", key, err)
	}
	return storage.Put([]byte(key), value), nil
}

// catalogIndexOp is the record of the last index handed out.
func catalogIndexOp(index uint64) storage.Op {
	op, err := catalogRecord(catalogIndexKey, &messages.CatalogIndex{Index: index})
	if err != nil {
		panic(err) // a message of one integer always encodes
	}
	return op
}

// loadCatalog rebuilds the catalog from bucket. A record that does not
// decode, is invalid, sits under the wrong key or is not a catalog record
// at all is corruption (storage.CorruptRecord): the error matches both
// storage.ErrCorrupt and model.ErrCorrupt, names the record and the
// remedy (-reset-corrupt-state). The catalog never starts silently empty
// or half restored.
func loadCatalog(bucket storage.Bucket) (*catalogState, error) {
	s := newCatalogState()
	err := bucket.Load(func(rawKey, value []byte) error {
		key := string(rawKey)
		var err error
		switch {
		case key == catalogIndexKey:
			var m messages.CatalogIndex
			if err = proto.Unmarshal(value, &m); err == nil {
				s.index = max(s.index, m.GetIndex())
			}
		case strings.HasPrefix(key, catalogPluginPrefix):
			err = s.restorePlugin(key, value)
		case strings.HasPrefix(key, catalogVolumePrefix):
			err = s.restoreVolume(key, value)
		default:
			err = errors.New("it is not a catalog record")
		}
		if err != nil {
			return storage.CorruptRecord(Bucket, rawKey, fmt.Errorf("%w: restore: %w", model.ErrCorrupt, err))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (s *catalogState) restorePlugin(key string, value []byte) error {
	var m messages.CatalogPlugin
	if err := proto.Unmarshal(value, &m); err != nil {
		return err
	}
	p, err := model.PluginFromProto(&m)
	if err != nil {
		return err
	}
	if want := catalogPluginPrefix + p.ID; want != key {
		return fmt.Errorf("it holds plugin %q", p.ID)
	}
	s.plugins[p.ID] = p
	s.index = max(s.index, p.ModifyIndex)
	return nil
}

func (s *catalogState) restoreVolume(key string, value []byte) error {
	var m messages.CatalogVolume
	if err := proto.Unmarshal(value, &m); err != nil {
		return err
	}
	v := model.VolumeFromProto(&m)
	if err := v.Validate(); err != nil {
		return err
	}
	vk, err := catalogVolumeKey(v.Namespace, v.ID)
	if err == nil && vk.storageKey() != key {
		err = fmt.Errorf("it holds volume %s", vk)
	}
	if err != nil {
		return err
	}
	s.volumes[vk] = v
	s.countVolume(v, 1)
	s.index = max(s.index, v.ModifyIndex)
	return nil
}

// distrustHealth is the change a restart makes: every fingerprint restored
// as healthy becomes unhealthy (the plugin may have gone while the agent was
// down; the CSI manager's replay says so soon enough), no restored instance
// is being taken over any more (every instance fingerprints afresh after a
// restart, so ReplacedBy is cleared), and every volume's health follows its
// plugin's counts. It forgets the plugins left empty.
func (s *catalogState) distrustHealth() catalogChange {
	change := catalogChange{sweep: true}
	for _, id := range slices.Sorted(maps.Keys(s.plugins)) {
		m := s.plugins[id].Proto()
		changed := false
		for _, inst := range slices.Concat(slices.Collect(maps.Values(m.GetControllers())), slices.Collect(maps.Values(m.GetNodes()))) {
			if inst.GetHealthy() {
				inst.Healthy, inst.HealthDescription = false, restoredDescription
				changed = true
			}
			if inst.GetReplacedBy() != "" {
				inst.ReplacedBy = ""
				changed = true
			}
		}
		if !changed {
			continue
		}
		p, err := model.PluginFromProto(m)
		if err != nil {
			panic(err) // it was decoded from the same form a moment ago
		}
		change.plugins = append(change.plugins, p)
	}
	change.followHealth(s)
	return change
}
