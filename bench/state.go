package bench

import (
	"container/list"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hashicorp/nomad/client/dynamicplugins"
	bolt "go.etcd.io/bbolt"

	"github.com/plugvisor/plugvisor/errclass"
)

// BoltState is a dynamicplugins.StateStorage that keeps Nomad's registry
// state in a bbolt file the way Nomad's client state DB does
// (client/state/db_bolt.go, PutDynamicPluginRegistryState): every Put
// encodes the whole state and writes it under one key in its own bbolt
// transaction, so one commit, with its fsyncs, per registration.
//
// Nomad encodes RegistryState with msgpack, which sees no exported fields in
// a container/list and writes each list as an empty map: its real state DB
// persists the plugin names and nothing else. BoltState encodes the lists
// explicitly, as JSON arrays of PluginInfo, newest first, so that it writes
// (and can restore) the state plugvisor's registry writes, and the durable
// comparison is like for like.
type BoltState struct {
	db *bolt.DB
}

var _ dynamicplugins.StateStorage = (*BoltState)(nil)

var (
	stateBucket = []byte("dynamic_plugins")
	stateKey    = []byte("registry_state")
)

// OpenBoltState opens (or creates) the bbolt file at path with Nomad's
// options: the defaults, fsync on every commit, and a lock timeout.
func OpenBoltState(path string) (*BoltState, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("bench: open %s: %w", path, err)
	}
	return &BoltState{db: db}, nil
}

// Close closes the file.
func (s *BoltState) Close() error { return s.db.Close() }

// storedState is RegistryState with its lists spelled out.
type storedState struct {
	Plugins map[string]map[string][]*dynamicplugins.PluginInfo
}

// EncodeState encodes state with its lists as arrays, newest first.
func EncodeState(state *dynamicplugins.RegistryState) ([]byte, error) {
	out := storedState{Plugins: make(map[string]map[string][]*dynamicplugins.PluginInfo, len(state.Plugins))}
	for ptype, names := range state.Plugins {
		byName := make(map[string][]*dynamicplugins.PluginInfo, len(names))
		for name, infos := range names {
			all := make([]*dynamicplugins.PluginInfo, 0, infos.Len())
			for e := infos.Front(); e != nil; e = e.Next() {
				all = append(all, e.Value.(*dynamicplugins.PluginInfo))
			}
			byName[name] = all
		}
		out.Plugins[ptype] = byName
	}
	return json.Marshal(out)
}

// DecodeState is the inverse of EncodeState.
func DecodeState(data []byte) (*dynamicplugins.RegistryState, error) {
	var in storedState
	if err := json.Unmarshal(data, &in); err != nil {
		return nil, fmt.Errorf("bench: decode registry state: %w", err)
	}
	state := &dynamicplugins.RegistryState{Plugins: make(map[string]map[string]*list.List, len(in.Plugins))}
	for ptype, names := range in.Plugins {
		byName := make(map[string]*list.List, len(names))
		for name, infos := range names {
			l := list.New()
			for _, info := range infos {
				l.PushBack(info)
			}
			byName[name] = l
		}
		state.Plugins[ptype] = byName
	}
	return state, nil
}

// PutDynamicPluginRegistryState encodes state and writes it in one bbolt
// transaction.
func (s *BoltState) PutDynamicPluginRegistryState(state *dynamicplugins.RegistryState) error {
	data, err := EncodeState(state)
	if err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(stateBucket)
		if err != nil {
			return err
		}
		return b.Put(stateKey, data)
	})
}

// errNoState says the file holds no registry state yet.
var errNoState = errclass.New(errclass.NotFound, "no registry state stored")

// GetDynamicPluginRegistryState reads and decodes the stored state.
func (s *BoltState) GetDynamicPluginRegistryState() (*dynamicplugins.RegistryState, error) {
	var data []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(stateBucket); b != nil {
			data = append([]byte(nil), b.Get(stateKey)...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if data == nil {
		return nil, errNoState
	}
	return DecodeState(data)
}
