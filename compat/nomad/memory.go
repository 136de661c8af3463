package nomad

import (
	"sync"

	"github.com/hashicorp/nomad/client/dynamicplugins"
)

// memoryState is the StateStorage of a registry given none: it keeps the
// last state written, as Nomad's test MemDB does.
type memoryState struct {
	mu    sync.Mutex
	state *dynamicplugins.RegistryState
}

func (m *memoryState) GetDynamicPluginRegistryState() (*dynamicplugins.RegistryState, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state, nil
}

func (m *memoryState) PutDynamicPluginRegistryState(state *dynamicplugins.RegistryState) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.state = state
	return nil
}
