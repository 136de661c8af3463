package nomad_test

import (
	"container/list"

	"github.com/hashicorp/nomad/client/dynamicplugins"
)

// toState builds Nomad's RegistryState from lists written newest first.
func toState(plugins map[string]map[string][]*dynamicplugins.PluginInfo) *dynamicplugins.RegistryState {
	state := &dynamicplugins.RegistryState{Plugins: map[string]map[string]*list.List{}}
	for ptype, byName := range plugins {
		state.Plugins[ptype] = map[string]*list.List{}
		for name, allocs := range byName {
			l := list.New()
			for _, p := range allocs {
				l.PushBack(p)
			}
			state.Plugins[ptype][name] = l
		}
	}
	return state
}
