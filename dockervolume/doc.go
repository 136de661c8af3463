// Package dockervolume is the Docker VolumeDriver plugin type: plugins that
// answer the activation handshake with "VolumeDriver" (plugin type
// "docker-volume", see discovery.TypesFor).
//
// An embedder starts the Docker volume plugin type with StartManager, on
// its actor system and registry (one supervised, health-checked instance
// per plugin), and serves volumes with dockerd's semantics through
// StartVolumes; Client talks to one plugin from plain Go.
//
// Client speaks Docker's volume plugin protocol to one such plugin, over
// discovery.Call: POST /VolumeDriver.Create {"Name", "Opts"}, .Remove
// {"Name"}, .Mount and .Unmount {"Name", "ID"}, .Path {"Name"} answered by
// {"Mountpoint"}, .Get {"Name"} answered by {"Volume": {"Name",
// "Mountpoint", "CreatedAt", "Status"}}, .List answered by {"Volumes": [...]},
// and .Capabilities answered by {"Capabilities": {"Scope"}}. Every answer
// may carry {"Err": "..."}; a non-empty Err, or an HTTP status other than
// 200, becomes an error holding the plugin's text. Each call is bounded by
// the time Docker gives it (LongTimeout for Create and Mount, ShortTimeout
// for the rest) or by the context's deadline, whichever comes first. A call
// that cannot reach its plugin is retried with moby's backoff for up to 30 s
// (see Retry); a plugin's own error never is. Where the volume service
// differs from dockerd's: docs/docker.md.
//
// The manager and instance actors of this plugin type build on Client.
package dockervolume
