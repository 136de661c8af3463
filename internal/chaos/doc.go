// Package chaos is plugvisor's nemesis: its tests run a real fleet (an
// etcd process, three agents as processes with real mounts, each with the
// reference hostpath CSI plugin on one shared storage root) and compose
// faults from a seed (kill -9 and restart of an agent, etcd cut for one
// agent, a cut of one member's port, etcd kill and restart, etcd restored
// from an older snapshot under running agents, drain and drain -force, a
// second agent with a live node ID, a member's lease revoked, kill -9
// and restart of a node's CSI plugin) while clients mount, write and
// unmount, and check the fleet's invariants by sampling the kernel's
// mount table and the fleet's claims:
//
//   - no writable mount of a single-node-writer volume on a node that does
//     not hold its claim, and never two, beyond the fence's bound;
//   - no mount or claim answered refused commits;
//   - every acknowledged mount holds its claim, and every acknowledged
//     unmount released it, unless a fault of the schedule took it away
//     (a drain -force, the GC of a dead node, a restore);
//   - no agent crashes;
//   - once the faults heal, every node converges: its publishes equal its
//     claims.
//
// `make test` runs the fixed schedules of the faults that once broke the
// fleet and a minute of random schedules; `make chaos` runs ten minutes
// and prints a table. Every failure prints its seed and schedule:
// CHAOS_SEED=<seed> replays it. The package has no code of its own.
package chaos
