// Package discovery finds plugins on disk and performs their activation
// handshakes. Scan, Lookup, Activate and Call are the synchronous building
// blocks for Docker-protocol plugins: they own no state and start nothing
// that outlives them. The actors that watch directories and feed the
// registry build on them.
//
// An embedder that wants plugins found on disk starts the discovery actor
// with Start, on its actor system and registry: it watches the socket and
// spec directories, activates what appears, registers each plugin under the
// types its manifest names, and deregisters it when its file goes.
// Subscribers (messages.SubscribeDiscovery) hear of every change. The
// functions below are its building blocks, usable alone.
//
// # Finding plugins
//
// Docker looks for plugins in a socket directory (/run/docker/plugins) and in
// spec directories (/etc/docker/plugins, then /usr/lib/docker/plugins); see
// DockerDirs. A plugin named x is one of:
//
//   - x.sock or x/x.sock in a socket directory: a unix socket;
//   - x.spec or x/x.spec in a spec directory: a text file holding one URL,
//     such as unix:///run/x.sock or tcp://10.0.0.1:8080;
//   - x.json or x/x.json in a spec directory: a JSON object
//     {"Name": "x", "Addr": "<URL>", "TLSConfig": {"InsecureSkipVerify": false,
//     "CAFile": "...", "CertFile": "...", "KeyFile": "..."}}, where Name is
//     ignored (the file name names the plugin) and TLSConfig is optional.
//
// Lookup finds one plugin by name in Docker's order of precedence; Scan finds
// every plugin, one Candidate per name, and reports each bad plugin as an
// error of its own without stopping. Both are pure functions of the
// directories' contents.
//
// Limits and checks, each reported as a *PluginError naming the plugin and
// its file: names are at most MaxNameLen (128) bytes and cannot hold path
// separators or be "." or ".."; unix socket paths are absolute and at most
// MaxSocketPathLen (107) bytes, the size of sun_path less its NUL; a .sock
// must be a socket; addresses use the schemes unix, tcp (a port is
// required), http or https; spec files are at most 64 KiB.
//
// # Addresses and TLS, as Docker
//
// unix://, tcp://, http:// and https:// are accepted. Only https:// speaks
// TLS: a tcp:// or http:// address is plain HTTP even when its .json spec
// has a TLSConfig. An https:// address in a .spec file skips certificate
// verification, as Docker's local plugins do, and so does a .json
// TLSConfig without a CAFile; with a CAFile, the certificate is verified
// against the system roots and that CA unless InsecureSkipVerify is set.
//
// # Where plugvisor differs from Docker
//
//   - Docker accepts a tcp:// address without a port (and fails to dial
//     it); plugvisor reports it at discovery.
//   - Docker accepts any URL scheme in a spec file and relative unix paths
//     (unix://x.sock); plugvisor rejects them.
//   - Docker ignores the Content-Type of answers; plugvisor accepts only
//     JSON ones (application/vnd.docker.plugins.v1.N+json or
//     application/json) or none.
//   - Docker retries a failed activation for 30 seconds; Activate tries once
//     and leaves retries to its caller (the discovery actor retries with a
//     fast backoff, then every minute, for as long as the file is there). It follows no redirects and uses no
//     HTTP proxy.
//
// # Talking to plugins
//
// Activate posts /Plugin.Activate and returns the plugin's Manifest; TypesFor
// maps its interfaces to plugvisor plugin types. Call makes any other
// Docker-protocol call; the dockervolume package builds on it. Every call
// opens its own connection and closes it before returning, so nothing runs
// on after a call. Failures are *CallError values matching one sentinel
// (ErrTimeout, ErrUnreachable, ErrNotAPlugin, ErrBadResponse,
// ErrPluginFailed, ...) with errors.Is.
package discovery
