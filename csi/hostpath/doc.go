// Package hostpath is plugvisor's reference CSI plugin: a volume is a
// directory <root>/volumes/<volume-id> on the local disk. It is as strict as
// the drivers of real disks, so that a container orchestrator tested against
// it drives those drivers correctly too.
//
// It serves the CSI Identity, Controller and Node services (which of the last
// two depends on Mode) over gRPC. All state lives under <root>/state, so a
// restarted plugin, or a controller and node processes sharing one root, see
// the same volumes, snapshots, attachments, stagings and publications: the
// controller's records in small JSON files, each replaced atomically, and
// each node's in one append-only journal to which the node RPCs of many
// volumes running at once append their changes with one shared sync (group
// commit), as a real driver keeps its state. A change is on disk before its
// RPC answers, so a killed plugin loses nothing it acknowledged. NodeStageVolume bind-mounts the
// volume directory on the staging path, as a disk driver mounts the disk
// there, and NodePublishVolume bind-mounts the staging path on the target,
// remounted read-only for a read-only publish, so /proc/self/mountinfo shows
// both. That needs root. Config.SymlinkFallback stages without a mount and
// publishes a symbolic link instead when bind mounts are not permitted (never
// read-only).
//
// # The strict rules
//
// Each refusal is a gRPC status with a "hostpath: " message that says why:
//
//   - A volume is staged once per node: NodeStageVolume at a second staging
//     path fails with FailedPrecondition (the same path again succeeds).
//   - NodeUnstageVolume while the volume is published at any target fails
//     with FailedPrecondition, naming the targets.
//   - NodePublishVolume before staging, or with a staging_target_path other
//     than the one the volume is staged at (an empty one included), fails with
//     FailedPrecondition: the driver advertises STAGE_UNSTAGE_VOLUME.
//   - A SINGLE_NODE_SINGLE_WRITER volume is published at one target at a time
//     (FailedPrecondition); publishing again at a target with other options
//     fails with AlreadyExists.
//   - DeleteVolume of a volume attached to, staged on or published on any
//     node fails with FailedPrecondition.
//   - Staging more than MaxVolumes volumes on a node fails with
//     ResourceExhausted.
//
// With Config.AttachRequired (-attach-required) the driver also behaves like
// a driver of network disks. The controller advertises PUBLISH_UNPUBLISH_VOLUME
// and PUBLISH_READONLY, and:
//
//   - ControllerPublishVolume returns a publish context with the keys
//     PublishContextAttachmentID (random, new at each attach) and
//     PublishContextNodeID. Attaching again alike returns the same context;
//     with another read-only flag or access mode it fails with AlreadyExists.
//     An unknown volume or node (no node plugin of that ID started on the
//     root) fails with NotFound; a volume attached to another node with
//     FailedPrecondition; more than MaxVolumes attached to the driver's own
//     node with ResourceExhausted.
//   - NodeStageVolume, and NodePublishVolume, of a volume not attached to the
//     node fail with FailedPrecondition; without the attachment's publish
//     context with InvalidArgument; with the context of another (older)
//     attachment with FailedPrecondition. A read-only attachment is published
//     read-only only (FailedPrecondition otherwise).
//   - ControllerUnpublishVolume while the node still stages or publishes the
//     volume fails with FailedPrecondition. A volume or node that is unknown,
//     or not attached, is already detached (OK); an empty node ID detaches
//     from every node.
//
// Without AttachRequired, ControllerPublishVolume and ControllerUnpublishVolume
// answer Unimplemented, and csi-sanity passes in both modes.
//
// Secrets in any request are accepted, and never logged, returned in an error
// or written to the root.
//
// A Driver is safe for concurrent RPCs and, like a real driver, runs node
// RPCs of different volumes at once: those of one volume run one at a time,
// stagings one at a time while MaxVolumes is set, and every other RPC that
// reads or writes state runs alone. It is a plugin that plugvisor talks to,
// not an actor.
package hostpath
