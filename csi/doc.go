// Package csi is plugvisor's side of the Container Storage Interface
// protocol: the gRPC client that talks to one CSI plugin over its unix
// socket, capabilities, the mapping of gRPC codes to errors, socket-path
// validation and the plugin type names. It owns no state and runs no actor.
//
//	c, err := csi.Dial(ctx, socketPath, csi.Options{})
//	info, err := c.GetPluginInfo(ctx)
//
// The client speaks CSI spec v1.13.0: it retries the connection with capped
// backoff until the caller's context ends, bounds every RPC with
// [Options.RPCTimeout], returns small plugvisor types where a caller wants
// facts ([PluginInfo], [NodeCapabilities]; capability values it does not
// name are kept, never an error), passes volume RPCs through unchanged, and
// turns gRPC codes into sentinels ([ErrNotFound], [ErrUnavailable], ...).
//
// It also holds the words the CSI actors share, so that none imports
// another: [Usage], [ClaimRequest], [ErrClaimRefused],
// [ErrInvalidVolumeRequest] and the health descriptions of fingerprints
// ([StoppedDescription]). The actors are in csi/manager, csi/volumes and
// csi/catalog; this package imports none of them.
//
// An RPC's error starts with the RPC's name. Sentinels carry a bare phrase
// ("not found") and a class of errclass, so that a wrapped error reads
// `NodeStageVolume: not found: volume "v1" does not exist`.
package csi

import "github.com/plugvisor/plugvisor/csi/catalog/model"

// Plugin types of CSI plugins in the registry. A monolith plugin registers
// under both and gets an instance for each. They are the model's
// (model.TypeController and model.TypeNode), named here for the protocol's
// users.
const (
	TypeController = model.TypeController
	TypeNode       = model.TypeNode
)
