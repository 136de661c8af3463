// Package registrytest helps tests that need a plugin registry: a real one
// on an in-memory store, with stub dispensers, as Nomad's
// StubDispenserForType gives its registry's tests.
package registrytest

import (
	"fmt"
	"maps"
	"testing"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
)

// StubDispenserForType makes cfg dispense plugins of ptype with dispenser,
// in place of whatever cfg had for ptype. The other types keep theirs, and
// the caller's map is not changed.
func StubDispenserForType(cfg *registry.Config, ptype string, dispenser registry.Dispenser) {
	stubbed := maps.Clone(cfg.Dispensers)
	if stubbed == nil {
		stubbed = map[string]registry.Dispenser{}
	}
	stubbed[ptype] = dispenser
	cfg.Dispensers = stubbed
}

// Returning is a dispenser that hands out value for every plugin.
func Returning(value any) registry.Dispenser {
	return func(*messages.PluginInfo) (any, error) { return value, nil }
}

// New starts a registry in system for the length of the test: on a fresh
// in-memory store unless cfg has a bucket, with a unique actor name unless
// cfg has one. It is shut down when the test ends.
func New(t testing.TB, system *actor.ActorSystem, cfg registry.Config) *registry.Registry {
	t.Helper()
	if cfg.Bucket == nil {
		bucket, err := storage.NewMemory().Bucket(registry.BucketName)
		if err != nil {
			t.Fatalf("registrytest: in-memory bucket: %v", err)
		}
		cfg.Bucket = bucket
	}
	if cfg.Name == "" {
		cfg.Name = fmt.Sprintf("registry-%p", cfg.Bucket)
	}
	r, err := registry.New(system, cfg)
	if err != nil {
		t.Fatalf("registrytest: start registry: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Shutdown(); err != nil {
			t.Errorf("registrytest: shut down registry: %v", err)
		}
	})
	return r
}
