// Package dockervolume is the Docker VolumeDriver plugin type: plugins that
// answer the activation handshake with "VolumeDriver" (plugin type
// "docker-volume", see discovery.TypesFor).
//
// An embedder starts the plugin type with Start, on its actor system
// and registry. The manager runs one supervised, health-checked instance
// per plugin. Client talks to one plugin from plain Go. The Docker volume
// service, which serves volumes with dockerd's semantics, is the
// sub-package volumes.
//
// Client speaks Docker's volume plugin protocol to one plugin, over
// discovery.Call:
//
//	POST /VolumeDriver.Create       {"Name", "Opts"}
//	POST /VolumeDriver.Remove       {"Name"}
//	POST /VolumeDriver.Mount        {"Name", "ID"}   → {"Mountpoint"}
//	POST /VolumeDriver.Unmount      {"Name", "ID"}
//	POST /VolumeDriver.Path         {"Name"}         → {"Mountpoint"}
//	POST /VolumeDriver.Get          {"Name"}         → {"Volume": {"Name", "Mountpoint", "CreatedAt", "Status"}}
//	POST /VolumeDriver.List                          → {"Volumes": [...]}
//	POST /VolumeDriver.Capabilities                  → {"Capabilities": {"Scope"}}
//
// Every answer may carry {"Err": "..."}. A non-empty Err, or an HTTP status
// other than 200, becomes an error holding the plugin's text. Each call is
// bounded by the time Docker gives it: LongTimeout for Create and Mount,
// ShortTimeout for the rest. A context with an earlier deadline bounds it
// sooner. A call that cannot reach its plugin is retried with moby's
// backoff for up to 30 s (see Retry). A plugin's own error is never
// retried.
package dockervolume
