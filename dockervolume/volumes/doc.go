// Package volumes is the Docker volume service: the Docker volumes of this
// node, kept as dockerd's volume store keeps them, on the volume plugins of
// the registry.
//
// An embedder starts it with Start, on its actor system, a store bucket
// (Bucket) and the drivers to use (RegistryDrivers):
//
//	bucket, err := store.Bucket(volumes.Bucket)
//	svc, err := volumes.Start(system, volumes.Config{
//		Bucket:  bucket,
//		Drivers: volumes.RegistryDrivers{Registry: reg},
//	})
//
// Each volume name maps to one driver. Mounts are counted by mount ID. A
// volume in use cannot be removed. Every change is in the store before it
// is answered. Where the service differs from dockerd's: docs/docker.md.
//
// The plugin type and the client of one plugin are in the parent package,
// dockervolume.
package volumes
