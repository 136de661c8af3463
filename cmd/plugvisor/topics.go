package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// helpTopics are the concepts an operator meets, each a help topic:
// `plugvisor help volumes` shows one, and each has its man page
// (plugvisor-volumes(1)). A topic is a command that does not run, and no
// command of the tree: `plugvisor volumes` stays an unknown command.
func helpTopics() []*cobra.Command {
	return []*cobra.Command{
		topic("volumes", "CSI volumes: created or registered, mounted for allocs, deleted", topicVolumes, `  plugvisor volume create -plugin hostpath -access-mode single-node-writer -size 1GiB db
  plugvisor volume mount db web-1
  plugvisor volume status db
  plugvisor volume unmount db web-1
  plugvisor volume delete db`),
		topic("claims", "who may use a volume: writers, readers, access modes", topicClaims, `  plugvisor volume claim db batch-1
  plugvisor volume mount -read-only db report-1
  plugvisor volume release db batch-1
  plugvisor volume status db`),
		topic("fleet", "cluster mode: agents sharing one catalog in etcd", topicFleet, `  plugvisor agent -node-id n1 -cluster-etcd https://10.0.0.2:2379 -cluster-address 10.0.0.5:7946 \
      -cluster-ca fleet-ca.pem -cluster-cert n1.pem -cluster-key n1-key.pem
  plugvisor node list
  plugvisor node drain n2`),
		topic("tokens", "ACL tokens for the API on TCP: the token file and its rights", topicTokens, `  install -m 0600 /dev/null /etc/plugvisor/tokens
  echo "$(openssl rand -hex 24) read dashboards" >> /etc/plugvisor/tokens
  plugvisor agent -http 127.0.0.1:4646 -token-file /etc/plugvisor/tokens
  curl -H "Authorization: Bearer $TOKEN" http://127.0.0.1:4646/v1/volumes`),
	}
}

// findTopic is the help topic args name, or nil.
func findTopic(args []string) *cobra.Command {
	if len(args) != 1 {
		return nil
	}
	for _, t := range helpTopics() {
		if t.Name() == args[0] {
			return t
		}
	}
	return nil
}

// topicList is the paragraph of the root's help that names the topics.
func topicList() string {
	var b strings.Builder
	b.WriteString("Help topics (plugvisor help TOPIC):")
	for _, t := range helpTopics() {
		fmt.Fprintf(&b, "\n  %-9s %s", t.Name(), t.Short)
	}
	return b.String()
}

// topic is a help topic: its help is its text, then its examples.
func topic(name, short, long, example string) *cobra.Command {
	c := &cobra.Command{Use: name, Short: short, Long: long, Example: example}
	c.SetHelpFunc(func(c *cobra.Command, _ []string) {
		fmt.Fprintf(c.OutOrStdout(), "%s\n\nExamples:\n%s\n", c.Long, c.Example)
	})
	return c
}

const topicVolumes = `A volume is a CSI volume the agent's catalog knows, named by its namespace
(default "default") and its ID. It comes in two ways: "volume create" asks the
plugin's controller to make it (CreateVolume), and "volume register" names one
the plugin already has. Either way it records the plugin, the access mode and
the attachment mode (file-system or block-device).

"volume mount ID ALLOC" claims the volume for an allocation (see "plugvisor help
claims"), then attaches it to this node (ControllerPublishVolume, when the
controller asks for it), stages it once per node (NodeStageVolume) and publishes
it once per allocation (NodePublishVolume); it prints the target path.
"volume unmount" undoes those steps in reverse and releases the claim. Every
step is written to the agent's state before and after its RPC, so an agent
killed half way finishes or undoes it when it starts again; "volume status"
shows where each step stands and the last error.

A volume is schedulable when its plugin has a healthy node plugin (and a
healthy controller, when it needs one). "volume delete" deletes it with the
plugin (-deregister-only keeps it there); a volume with claims is refused.
More: docs/volumes.md.`

const topicClaims = `A claim says that an allocation (an ALLOC: any ID the orchestrator gives a
running task) uses a volume, to read or to write. The catalog decides every
claim, and refuses one that would break the volume's access mode:

    single-node-reader-only    readers only, all on one node
    single-node-writer         one writer and any readers, all on one node
    multi-node-reader-only     readers only, on any nodes
    multi-node-single-writer   one writer, readers on any nodes
    multi-node-multi-writer    any writers and readers, on any nodes

An allocation holds one claim per volume, read or write: it releases one before
asking for the other. "volume mount" claims before it stages or publishes, and
a refused claim sends no RPC (409, exit code 1). "volume claim" and "volume
release" take and give back a claim without a mount. Releasing what is not held
changes nothing; a claim being released keeps its place until the plugin has
unpublished. In a fleet, claims live in etcd and a node that is down keeps
them until the fleet's GC frees them (see "plugvisor help fleet").`

const topicFleet = `In cluster mode (-cluster-etcd), agents share one catalog in etcd: volumes,
claims and every node's plugin health. A claim is an etcd transaction, so no
two nodes get the writer slot of a single-writer volume; each volume's claims
go through one grain of the fleet. The fleet trusts certificates of one CA
("plugvisor tls" makes them): etcd takes only clients with one
(-cluster-etcd-ca, -cluster-etcd-cert, -cluster-etcd-key), and members talk
over mutual TLS (-cluster-ca, -cluster-cert, -cluster-key); an http:// etcd
off loopback is refused, and -cluster-insecure is for a demo on one machine.

Each node renews a lease (-cluster-lease-ttl, default 10s). A node that stops
renewing counts as down, and its plugins leave the health counts. A node cut
off from etcd fences its writers: new claims answer 503, and after a whole TTL
its writable mounts turn read-only. Its claims stay until the fleet's GC
(-cluster-gc-interval, off by default) frees them, once the node has been down
past -cluster-gc-grace (default 5m), which must be longer than the lease TTL
plus -cluster-fence-margin. "node list" shows the nodes; "node drain" refuses
new claims of a node's allocations and waits until it holds none, before
maintenance. More: docs/fleet.md.`

const topicTokens = `The API on the unix socket <data-dir>/plugvisor.sock is trusted by its file
mode (0600). The API on TCP (-http) needs protection: beyond loopback, TLS with
client certificates (-tls-cert, -tls-key, -tls-ca); on loopback, TLS or ACL
tokens. -token-file names the file of tokens, mode 0600, one per line:

    <token> <rights> [name]

A token is at least 16 characters; rights are a comma-separated list of:

    read      every GET: plugins, volumes, events, health, metrics
    volumes   read, and what changes volumes: create, mount, claim, delete ...
    plugins   read, and registering and deregistering plugins
    admin     everything ("write" means the same)

and the name says who acted, in logs and events ("token:<name>"). A client sends
"Authorization: Bearer <token>"; a missing or unknown token answers 401, a
token without the route's right 403. Tokens never appear in output or logs,
and never in a config file: token_file is a path. SIGHUP (systemctl reload)
reads the file again: a token taken out of it is refused from then on.
More: docs/security.md.`
