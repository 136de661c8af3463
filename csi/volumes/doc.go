// Package volumes is the CSI volume manager: the actor that stages and
// publishes the volumes of csi-node plugins for allocs, and unpublishes and
// unstages them again; its Go facade ([Volumes], [Mounter]); the layout of
// staging and target paths ([PluginPaths]); and [LocalClaimer], the default
// claimer when no catalog is wired in.
//
// State it owns: the usage tracker (which alloc uses which volume, with
// which [csi.Usage], and which usages are staged), one queue of operations
// per volume, and one CSI client per plugin socket. Nothing of it is
// durable yet: a restart of the agent forgets what is mounted.
//
// Messages it takes: MountVolume, UnmountVolume and ShutdownVolumes (each
// answered to its ReplyTo or sender with MountVolumeResponse,
// UnmountVolumeResponse, ShutdownVolumesResponse), and the results of its
// own jobs. It sends nothing else; it asks the registry (by the
// registry.Registry facade) for a plugin's current socket, and a
// [csi.Claimer] (the catalog, or LocalClaimer) for claims.
//
// Imports: csi (the protocol and the shared volume vocabulary),
// csi/catalog/model, registry, actors, messages. Never csi/manager or
// csi/catalog: the catalog comes in as a csi.Claimer.
//
// One actor per agent mounts the volumes of every csi-node plugin. It owns
// the usage tracker (which alloc uses which volume, how, and which usages
// of each volume are staged), a queue of operations per volume, and a
// client per plugin socket. A volume is (plugin, namespace, volume ID).
//
// Operations on one volume run one at a time, in the order they arrived;
// operations on different volumes run concurrently. The actor decides on
// its own goroutine what an operation must do (stage or not, unstage or
// not) from the tracker, runs the claim and the RPCs in a goroutine, and
// applies the outcome to the tracker when the result comes back as a
// message. Because the next operation on the volume starts only then, an
// unmount racing a mount can never unstage under the new mount (Nomad
// issue 20424): the two run one after the other.
//
// A mount: claim (Claimer) → NodeGetCapabilities (once per socket) →
// NodeStageVolume (if the plugin has STAGE_UNSTAGE_VOLUME and the usage is
// not staged yet) → NodePublishVolume. If publishing fails, a staging made
// by this mount is undone and the claim released.
//
// An unmount: NodeUnpublishVolume → remove the target path →
// NodeUnstageVolume (if this was the last alloc of a staged usage) →
// release the claim. Each step that succeeds is recorded, so a failed
// unmount retried later resumes where it stopped.
package volumes
