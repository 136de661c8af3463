// Package nomad is a drop-in for Nomad v1.11.3's client dynamic plugin
// registry (client/dynamicplugins) on plugvisor's registry. Swap
//
//	dynamicplugins.NewRegistry(stateDB, dispensers)
//
// for
//
//	nomad.NewRegistry(stateDB, dispensers)
//
// and hand the result wherever a dynamicplugins.Registry goes (the CSI
// manager's Config.DynamicRegistry, the alloc runners). Like Nomad's
// constructor it never fails, and it persists through the embedder's
// StateStorage; New takes a plugvisor bbolt bucket instead.
//
// It refuses what Nomad's registry refuses, with Nomad's error text, and
// keeps plugvisor's promises: a write returns once stored, a slow
// subscriber blocks nobody, a re-registration with new connection info is
// applied, and writes after Shutdown fail rather than hang. README.md says
// what differs, and why this module is on CSI spec v1.12.0.
package nomad
