package nomad_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/nomad/client/dynamicplugins"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/compat/nomad"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
)

func TestBadInputIsRefusedWithNomadsWordsAndChangesNothing(t *testing.T) {
	r := newRegistry(t, nil, map[string]dynamicplugins.PluginDispenser{"csi": echo})
	require.NoError(t, r.RegisterPlugin(info("csi", "p", "a1", "/run/p.sock")))
	conn := &dynamicplugins.PluginConnectionInfo{}
	tests := []struct {
		name     string
		call     func() error
		want     string
		sentinel error
	}{
		{"a nil registration (Nomad's panics)", func() error { return r.RegisterPlugin(nil) }, "Plugin must not be nil", nomad.ErrInvalid},
		{"no type", func() error { return r.RegisterPlugin(&dynamicplugins.PluginInfo{Name: "p", ConnectionInfo: conn}) },
			"Plugin.Type must not be empty", nomad.ErrInvalid},
		{"no connection info", func() error { return r.RegisterPlugin(&dynamicplugins.PluginInfo{Type: "csi", Name: "p"}) },
			"Plugin.ConnectionInfo must not be nil", nomad.ErrInvalid},
		{"no name", func() error { return r.RegisterPlugin(&dynamicplugins.PluginInfo{Type: "csi", ConnectionInfo: conn}) },
			"Plugin.Name must not be empty", nomad.ErrInvalid},
		{"deregister with no type", func() error { return r.DeregisterPlugin("", "p", "a1") },
			"must specify plugin type to deregister", nomad.ErrInvalid},
		{"deregister with no name", func() error { return r.DeregisterPlugin("csi", "", "a1") },
			"must specify plugin name to deregister", nomad.ErrInvalid},
		{"deregister with no alloc", func() error { return r.DeregisterPlugin("csi", "p", "") },
			"must specify plugin allocation ID to deregister", nomad.ErrInvalid},
		{"deregister from a type never registered", func() error { return r.DeregisterPlugin("csi-node", "p", "a1") },
			"no plugins registered for type: csi-node", nomad.ErrNoPluginsForType},
		{"dispense with no type", func() error { _, err := r.DispensePlugin("", "p"); return err },
			"must specify plugin type to dispense", nomad.ErrInvalid},
		{"dispense with no name", func() error { _, err := r.DispensePlugin("csi", ""); return err },
			"must specify plugin name to dispense", nomad.ErrInvalid},
		{"alloc of a type never registered", func() error { _, err := r.PluginForAlloc("csi-node", "p", "a1"); return err },
			"no plugins registered for type: csi-node", nomad.ErrNoPluginsForType},
		{"alloc not registered", func() error { _, err := r.PluginForAlloc("csi", "p", "a2"); return err },
			"no plugin for that allocation", nomad.ErrAllocNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			require.EqualError(t, err, tt.want)
			require.ErrorIs(t, err, tt.sentinel)
		})
	}
	require.Equal(t, []*dynamicplugins.PluginInfo{info("csi", "p", "a1", "/run/p.sock")}, r.ListPlugins("csi"))
}

func TestDispensingAPluginOfAKnownTypeWithNoDispenserSaysSo(t *testing.T) {
	r := newRegistry(t, nil, nil)
	require.NoError(t, r.RegisterPlugin(info("csi", "p", "a1", "/run/p.sock")))
	_, err := r.DispensePlugin("csi", "p")
	require.EqualError(t, err, "no plugin dispenser found for type: csi")
	require.ErrorIs(t, err, nomad.ErrNoDispenser)
}

func TestWhatPlugvisorWouldRefuseButNomadTakesComesBackAsGiven(t *testing.T) {
	r := newRegistry(t, nil, map[string]dynamicplugins.PluginDispenser{"csi/odd": echo})
	odd := []*dynamicplugins.PluginInfo{
		info("csi/odd", "no alloc and no socket", "", ""),
		info("csi/odd", "../climbs", "~starts-with-the-escape", "relative.sock"),
		info("csi/odd", "long-socket", "a1", "/"+strings.Repeat("s", 200)),
	}
	odd[0].Options = map[string]string{"MountPoint": "/m"}
	for _, p := range odd {
		require.NoError(t, r.RegisterPlugin(p))
	}
	require.ElementsMatch(t, odd, r.ListPlugins("csi/odd"))
	for _, p := range odd {
		got, err := r.DispensePlugin(p.Type, p.Name)
		require.NoError(t, err)
		require.Equal(t, p, got)
	}
	// As in Nomad, an allocation with no ID cannot be deregistered.
	require.EqualError(t, r.DeregisterPlugin("csi/odd", odd[0].Name, ""), "must specify plugin allocation ID to deregister")
	for _, p := range odd[1:] {
		require.NoError(t, r.DeregisterPlugin(p.Type, p.Name, p.AllocID))
	}
	require.Equal(t, odd[:1], r.ListPlugins("csi/odd"))
}

func TestAnIDTooLongForPlugvisorIsRefusedWithTheLimit(t *testing.T) {
	r := newRegistry(t, nil, nil)
	err := r.RegisterPlugin(info("csi", strings.Repeat("n", 129), "a1", "/run/p.sock"))
	require.ErrorIs(t, err, nomad.ErrInvalid)
	require.ErrorContains(t, err, "Plugin.Name is 129 bytes")
	require.Empty(t, r.ListPlugins("csi"))
}

func TestEmptyTypeListsEveryType(t *testing.T) {
	r := newRegistry(t, nil, nil)
	require.NoError(t, r.RegisterPlugin(info(dynamicplugins.PluginTypeCSINode, "p", "a1", "/run/p.sock")))
	require.NoError(t, r.RegisterPlugin(info(dynamicplugins.PluginTypeCSIController, "p", "a1", "/run/p.sock")))
	require.Len(t, r.ListPlugins(""), 2)
	require.Nil(t, r.ListPlugins("docker"))
}

func TestAStubReplacesADispenserWhileTheRegistryRuns(t *testing.T) {
	r := newRegistry(t, nil, map[string]dynamicplugins.PluginDispenser{"csi": echo})
	require.NoError(t, r.RegisterPlugin(info("csi", "p", "a1", "/run/p.sock")))
	stub := func(*dynamicplugins.PluginInfo) (any, error) { return "stub", nil }
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 100 {
			_, err := r.DispensePlugin("csi", "p")
			require.NoError(t, err)
		}
	})
	r.StubDispenserForType("csi", stub)
	r.StubDispenserForType("other", stub) // no dispenser of its own: the stub is not used
	wg.Wait()
	got, err := r.DispensePlugin("csi", "p")
	require.NoError(t, err)
	require.Equal(t, "stub", got)
	_, err = r.DispensePlugin("other", "p")
	require.ErrorIs(t, err, nomad.ErrNoDispenser)

	r.StubDispenserForType("csi", nil)
	got, err = r.DispensePlugin("csi", "p")
	require.NoError(t, err)
	require.IsType(t, &dynamicplugins.PluginInfo{}, got)
}

func TestDeregisteringTheCurrentAllocSaysWhichIsCurrentAgain(t *testing.T) {
	r := newRegistry(t, nil, nil)
	ch := r.PluginsUpdatedCh(t.Context(), "csi")
	require.NoError(t, r.RegisterPlugin(info("csi", "p", "a0", "/run/a0.sock")))
	require.NoError(t, r.RegisterPlugin(info("csi", "p", "a1", "/run/a1.sock")))
	require.NoError(t, r.DeregisterPlugin("csi", "p", "a1"))
	require.NoError(t, r.DeregisterPlugin("csi", "p", "not-registered")) // nil, and no event (Nomad's sends one for a0)
	updated := info("csi", "p", "a0", "/run/a0-moved.sock")
	require.NoError(t, r.RegisterPlugin(updated)) // Nomad's ignores this

	type seen struct {
		kind  dynamicplugins.EventType
		alloc string
	}
	var got []seen
	for range 5 {
		e := next(t, ch)
		got = append(got, seen{e.EventType, e.Info.AllocID})
	}
	require.Equal(t, []seen{
		{dynamicplugins.EventTypeRegistered, "a0"},
		{dynamicplugins.EventTypeRegistered, "a1"},
		{dynamicplugins.EventTypeDeregistered, "a1"},
		{dynamicplugins.EventTypeRegistered, "a0"},
		{dynamicplugins.EventTypeRegistered, "a0"},
	}, got)
	p, err := r.PluginForAlloc("csi", "p", "a0")
	require.NoError(t, err)
	require.Equal(t, "/run/a0-moved.sock", p.ConnectionInfo.SocketPath)
}

func TestAfterShutdownWritesFailAndChannelsClose(t *testing.T) {
	r := newRegistry(t, nil, nil)
	ch := r.PluginsUpdatedCh(t.Context(), "csi")
	r.Shutdown()
	_, open := <-ch
	require.False(t, open)
	require.ErrorIs(t, r.RegisterPlugin(info("csi", "p", "a1", "/run/p.sock")), registry.ErrShutdown)
	_, err := r.WaitForPlugin(t.Context(), "csi", "p")
	require.ErrorIs(t, err, registry.ErrShutdown)
	// A refused subscription delivers nothing and closes with its context.
	ctx, cancel := context.WithCancel(t.Context())
	late := r.PluginsUpdatedCh(ctx, "csi")
	cancel()
	_, open = <-late
	require.False(t, open)
	r.Shutdown()
}

func TestWaitForPluginReturnsOnceRegisteredOrItsContextsError(t *testing.T) {
	r := newRegistry(t, nil, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := r.WaitForPlugin(ctx, "csi", "p")
	require.Equal(t, context.Canceled, err) // unwrapped, as Nomad's

	got := make(chan *dynamicplugins.PluginInfo, 1)
	go func() {
		p, err := r.WaitForPlugin(t.Context(), "csi", "p")
		require.NoError(t, err)
		got <- p
	}()
	require.NoError(t, r.RegisterPlugin(info("csi", "p", "a1", "/run/p.sock")))
	require.Equal(t, "a1", (<-got).AllocID)
}

// jsonState is a StateStorage that keeps real bytes, as a client state DB
// does: what it restores is only what survived encoding (each plugin's
// allocations as a JSON array, newest first, as bench.BoltState encodes
// them; Nomad's msgpack encoding keeps no allocations at all).
type jsonState struct {
	mu   sync.Mutex
	data []byte
	fail error
}

func (s *jsonState) PutDynamicPluginRegistryState(state *dynamicplugins.RegistryState) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	plugins := map[string]map[string][]*dynamicplugins.PluginInfo{}
	for ptype, byName := range state.Plugins {
		plugins[ptype] = map[string][]*dynamicplugins.PluginInfo{}
		for name, allocs := range byName {
			for e := allocs.Front(); e != nil; e = e.Next() {
				plugins[ptype][name] = append(plugins[ptype][name], e.Value.(*dynamicplugins.PluginInfo))
			}
		}
	}
	data, err := json.Marshal(plugins)
	s.data = data
	return err
}

func (s *jsonState) GetDynamicPluginRegistryState() (*dynamicplugins.RegistryState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.data == nil {
		return nil, nil
	}
	var plugins map[string]map[string][]*dynamicplugins.PluginInfo
	if err := json.Unmarshal(s.data, &plugins); err != nil {
		return nil, err
	}
	return toState(plugins), nil
}

func TestTheStateSurvivesEncodingAndARestartKeepsTheNewestCurrent(t *testing.T) {
	state := &jsonState{}
	first := newRegistry(t, state, map[string]dynamicplugins.PluginDispenser{"csi": echo})
	for _, alloc := range []string{"a0", "a1", "a2"} {
		require.NoError(t, first.RegisterPlugin(info("csi", "p", alloc, "/run/"+alloc+".sock")))
	}
	require.NoError(t, first.RegisterPlugin(info("csi", "odd/name", "", "")))
	require.NoError(t, first.DeregisterPlugin("csi", "p", "a2"))
	first.Shutdown()

	second := newRegistry(t, state, map[string]dynamicplugins.PluginDispenser{"csi": echo})
	got, err := second.DispensePlugin("csi", "p")
	require.NoError(t, err)
	require.Equal(t, "a1", got.(*dynamicplugins.PluginInfo).AllocID)
	require.NoError(t, second.DeregisterPlugin("csi", "p", "a1"))
	got, err = second.DispensePlugin("csi", "p")
	require.NoError(t, err)
	require.Equal(t, "a0", got.(*dynamicplugins.PluginInfo).AllocID)
	odd, err := second.PluginForAlloc("csi", "odd/name", "")
	require.NoError(t, err)
	require.Equal(t, info("csi", "odd/name", "", ""), odd)
}

func TestAStateThatCannotBeWrittenFailsTheWriteAndChangesNothing(t *testing.T) {
	state := &jsonState{}
	r := newRegistry(t, state, nil)
	require.NoError(t, r.RegisterPlugin(info("csi", "p", "a0", "/run/a0.sock")))
	state.mu.Lock()
	state.fail = errors.New("disk full")
	state.mu.Unlock()
	err := r.RegisterPlugin(info("csi", "p", "a1", "/run/a1.sock"))
	require.ErrorIs(t, err, registry.ErrStore)
	require.ErrorContains(t, err, "disk full")
	require.Equal(t, "a0", r.ListPlugins("csi")[0].AllocID)
}

func TestAStateThatCannotBeReadOrHoldsJunkStartsWhatItCan(t *testing.T) {
	r := newRegistry(t, &jsonState{data: []byte("not json")}, nil)
	require.Nil(t, r.ListPlugins(""))

	junk := toState(map[string]map[string][]*dynamicplugins.PluginInfo{
		"csi": {
			"no-conn": {{Type: "csi", Name: "no-conn", AllocID: "a0"}},
			"nil":     {nil},
			"huge":    {info("csi", "huge", strings.Repeat("a", 300), "/run/h.sock")},
			"good":    {info("csi", "good", "a1", "/run/g.sock")},
		},
	})
	r = newRegistry(t, &MemDB{dynamicManagerPs: junk}, nil)
	require.Equal(t, []*dynamicplugins.PluginInfo{info("csi", "good", "a1", "/run/g.sock")}, r.ListPlugins("csi"))
}

func info(ptype, name, alloc, socket string) *dynamicplugins.PluginInfo {
	return &dynamicplugins.PluginInfo{Type: ptype, Name: name, AllocID: alloc,
		ConnectionInfo: &dynamicplugins.PluginConnectionInfo{SocketPath: socket}}
}

func echo(i *dynamicplugins.PluginInfo) (any, error) { return i, nil }

func TestAReaderThatFellBehindGetsTheCurrentPluginsAgain(t *testing.T) {
	r := nomad.New(nomad.Config{Backlog: 1})
	t.Cleanup(r.Shutdown)
	ch := r.PluginsUpdatedCh(t.Context(), "csi")
	names := []string{"p1", "p2", "p3", "p4", "p5"}
	for _, name := range names { // nobody reads: the subscription lags
		require.NoError(t, r.RegisterPlugin(info("csi", name, "a1", "/run/"+name+".sock")))
	}
	seen := map[string]int{}
	for seen["p1"] < 2 { // once live, once replayed
		e := next(t, ch)
		require.Equal(t, dynamicplugins.EventTypeRegistered, e.EventType)
		seen[e.Info.Name]++
	}
	for _, name := range names[1:] { // the replay goes on with the others, by name
		e := next(t, ch)
		require.Equal(t, dynamicplugins.EventTypeRegistered, e.EventType)
		require.Equal(t, name, e.Info.Name)
	}
}

func TestAPlugvisorBucketThatCannotBeRestoredStartsEmptyAndWorks(t *testing.T) {
	bucket, err := storage.NewMemory().Bucket(registry.BucketName)
	require.NoError(t, err)
	require.NoError(t, bucket.Apply([]storage.Op{storage.Put([]byte("csi\x00p\x00a1"), []byte("not a record"))}))
	r := nomad.New(nomad.Config{Bucket: bucket})
	t.Cleanup(r.Shutdown)
	require.Nil(t, r.ListPlugins(""))
	require.NoError(t, r.RegisterPlugin(info("csi", "p", "a2", "/run/p.sock")))
	require.Equal(t, "a2", r.ListPlugins("csi")[0].AllocID)
}
