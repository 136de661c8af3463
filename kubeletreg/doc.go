// Package kubeletreg takes CSI plugins' registrations the way kubelet's
// plugin watcher does, so that a CSI driver deployed with its
// node-driver-registrar sidecar registers with plugvisor unchanged.
//
// An embedder starts the watcher with Start, on its actor system and
// registry, naming the registration directories (kubelet's is KubeletDir).
// For each socket that appears there, the watcher calls GetInfo
// (pluginregistration.v1), refuses what kubelet refuses (a type other
// than CSIPlugin, no CSI 1.x version) and what plugvisor refuses (a name
// or an endpoint that fails the names rules, an endpoint that is not a
// unix socket, a name another socket holds with another endpoint), asks
// the plugin's CSI endpoint for its identity, registers it as csi-node
// (and csi-controller when it offers CONTROLLER_SERVICE) under AllocID of
// the socket, and tells the socket with NotifyRegistrationStatus. When
// the socket goes away, the plugin is deregistered. Plugins lists every
// socket in discovery's shape, for the discovered-plugins view.
//
// A socket that does not answer in time, or whose CSI endpoint does not,
// is tried again after a backoff and is not told (kubelet does not tell
// it either, and node-driver-registrar exits when told it failed).
package kubeletreg
