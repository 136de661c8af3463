// Package csi is plugvisor's side of the Container Storage Interface
// protocol: the gRPC client that talks to one CSI plugin over its unix
// socket, capabilities, the mapping of gRPC codes to errors, socket-path
// validation and the plugin type names. It owns no state and runs no actor.
//
// An embedder uses Dial to talk to one CSI plugin from plain Go, and the
// type names (TypeNode, TypeController) to register CSI plugins with the
// registry; the actors that run CSI plugins for it are in the sub-packages
// below.
//
// It also holds the vocabulary that several actors share, so that none of
// them imports another: the volume usage and claim request ([Usage],
// [ClaimRequest]), the [Claimer] interface, the claim and bad-request
// sentinels ([ErrClaimRefused], [ErrInvalidVolumeRequest]) and the health
// descriptions of fingerprints ([StoppedDescription]).
//
// The actors live in sub-packages: csi/manager (the CSI manager and its
// plugin instances), csi/volumes (the volume manager) and csi/catalog (the
// catalog; its model is csi/catalog/model). This package imports none of
// them: only the model, messages, and registry for the socket-path limit.
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
// An RPC's error starts with the RPC's name. Sentinels carry a bare phrase
// ("not found") and a class of errclass, so that a wrapped error reads
// `NodeStageVolume: not found: volume "v1" does not exist`.
package csi

// Plugin types of CSI plugins in the registry. A monolith plugin registers
// under both and gets an instance for each.
const (
	TypeController = "csi-controller"
	TypeNode       = "csi-node"
)
