// Package reliability holds the long reliability suite of the agent, run by
// `make reliability` (go test -tags reliability): kill -9 during
// registration bursts, a full disk, bit flips in the state file, slow-body
// connections, 3000 slow clients on each listener, the event stream cap, a
// plugin that hangs at every RPC, and 64 clients at once. It drives the
// agent as built, over its unix socket (and loopback TCP and TLS for the
// slow clients), and writes its table to RELIABILITY.md. Every request loop
// is bounded in time and count.
package reliability
