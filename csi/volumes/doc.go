// Package volumes is the volume manager: one actor per agent that mounts
// catalog volumes for allocs on this node, as kubelet and Nomad drive CSI.
//
// An embedder starts it with Start, on its actor system, a bucket of its
// store, the catalog and the registry, and calls Manager.Mount and
// Manager.Unmount for each alloc: the manager claims, attaches, stages and
// publishes (and the reverse), keeps a durable record of every step, and
// reconciles the records with the kernel's mount table at start.
//
// # State it owns
//
// One durable record per volume held on this node (messages.VolumeRecord,
// in the Bucket of the agent's store, key volume/<namespace>/<id>): the
// attachment (state, the plugin's node ID from NodeGetInfo, the controller
// socket, publish_context), the stage (state, the one staging path per
// volume, the node socket), and one publish per alloc (state, target path,
// read_only, claimed_by_mount, node socket, last error). Memory is never the
// authority: every step writes its "-ing" state before its RPC and its done
// state (or removes the part) after it, and a job whose write fails sends
// no further RPC. Besides the records the actor owns the per-volume queues,
// each volume's latest outcome, the GC backoff, and the orphan mounts found
// at start.
//
// # Messages it takes
//
// MountAllocVolume (answered by MountAllocVolumeResponse), UnmountAllocVolume,
// ClaimAllocVolume, ReleaseAllocVolume, DetachVolume, ShutdownVolumeManager
// (answered by VolumeOpResponse), NodeExpandAllocVolume (answered by
// NodeExpandAllocVolumeResponse) and VolumeStatusRequest (answered by
// VolumeStatusResponse), from the facade (Manager) or any actor.
//
// A node expansion (NodeExpandVolume, after the controller expanded the
// volume: Manager implements controller.NodeExpander) runs in the volume's
// queue like a mount, at the first published target; a volume published
// nowhere on this node has nothing to expand. A status of a published
// volume carries the node plugin's NodeGetVolumeStats answer when it
// advertises GET_VOLUME_STATS, asked on a goroutine outside the queue
// within one RPC timeout.
//
// # Lifecycle
//
// In: claim (catalog) → ControllerPublishVolume, only when the controller
// advertises PUBLISH_UNPUBLISH_VOLUME and the volume is not attached →
// NodeStageVolume, only with STAGE_UNSTAGE_VOLUME and once per volume per
// node → NodePublishVolume per alloc, read-only for a reader. Out:
// NodeUnpublishVolume → (no other publish record left) NodeUnstageVolume →
// ControllerUnpublishVolume with the stored node ID → release the claim the
// mount made → remove the publish record. A failed mount rolls back what
// it did; a failed step leaves its state and last error, and the GC step
// reconciles the volume again with backoff until it settles (a detach that
// fails also records the claim as a past claim in the catalog, and the
// alloc keeps its claim until the detach goes through).
//
// Operations on one volume run one at a time through its queue; different
// volumes run concurrently. Each operation has a deadline; its caller is
// answered within it, and the operation is never tied to the caller.
//
// At start every record is reconciled with the kernel's mount table: states
// of the way in roll back, states of the way out complete, a published
// volume whose target is not mounted is staged and published again, a
// published volume's condition is asked of the node plugin where it can say
// (an abnormal condition, or NotFound, becomes its publish's last error,
// cleared once normal), and a stage or attachment with no publish left is
// taken down. A node plugin
// that is no longer registered keeps serving the way out of what it
// mounted: the socket recorded with the stage and publish is dialled.
package volumes
