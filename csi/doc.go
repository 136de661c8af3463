// Package csi is plugvisor's side of the Container Storage Interface: the gRPC
// client that talks to one CSI plugin over its unix socket, and (in files of
// their own) the CSI manager, plugin instance actors, fingerprinting and the
// catalog actor. The volume manager is package csi/volumes.
//
// The client ([Dial], [Client]) speaks CSI spec v1.13.0. It connects with the
// authority "localhost" through a unix-socket dialer, retries the connection
// with capped exponential backoff until the caller's context ends, bounds
// every RPC with [Options.RPCTimeout] on top of the caller's context, and
// turns gRPC status codes into sentinel errors ([ErrNotFound],
// [ErrUnavailable], ...) that callers test with errors.Is.
//
// Where a caller wants facts rather than protocol (plugin info, capabilities,
// node info, readiness) the client returns small plugvisor types such as
// [PluginInfo] and [NodeCapabilities]. Capability values this spec version
// does not name (drivers built on spec 1.12 still send 4 and 11) are kept in
// the Unknown fields and are never an error. Volume RPCs pass the CSI
// request and response types through unchanged.
//
// Every error this package returns starts with "csi: ". Sentinels carry a
// bare phrase ("not found") so that a wrapped error reads
// `csi: NodeStageVolume: not found: volume "v1" does not exist`.
package csi

// Plugin types of CSI plugins in the registry. A monolith plugin registers
// under both and gets an instance for each.
const (
	TypeController = "csi-controller"
	TypeNode       = "csi-node"
)
