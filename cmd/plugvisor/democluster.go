package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/fleet/embedded"
	cmdline "github.com/plugvisor/plugvisor/internal/cli"
)

const demoClusterLong = `Runs a fleet of three agents on this machine, in a temp dir, and shows
what cluster mode keeps right:
  1. an etcd member (in-process, loopback) and three agents in child
     processes, each with a hostpath CSI plugin;
  2. one volume registered through the first agent, seen by all three;
  3. the second and third agents racing to claim it for writing at the
     same moment: exactly one wins;
  4. the winner killed with SIGKILL: once its lease runs out the fleet
     counts the plugin on one node fewer, and its claim stays;
  5. the loser trying again is still refused while the dead node's claim
     stands; the fleet's GC frees that claim once the node has been down
     past its grace (-cluster-gc-grace), and the loser's claim then wins.
Members talk without TLS on loopback (-cluster-insecure), and so does etcd;
a real fleet gives them certificates (plugvisor tls, docs/fleet.md).`

// clusterNodes are the demo's agents.
var clusterNodes = []string{"n1", "n2", "n3"}

func newDemoClusterCmd() *cobra.Command {
	var keep bool
	cmd := &cobra.Command{
		Use:     "demo-cluster",
		Short:   "run three agents on etcd in a temp dir: a claim race, a node killed, the catalog kept right",
		Long:    demoClusterLong,
		Example: "  plugvisor demo-cluster          # or: make demo-cluster\n  plugvisor demo-cluster -keep",
		Args:    cmdline.Args("", "plugvisor demo-cluster"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemoCluster(keep, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the temp dir (and the agents' logs) afterwards")
	return cmd
}

func runDemoCluster(keep bool, stdout io.Writer) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "pvfleet")
	if err != nil {
		return err
	}
	d := &demo{out: stdout, dir: dir, self: self, procs: map[string]*exec.Cmd{}, root: os.Geteuid() == 0}
	start := time.Now()
	d.say("plugvisor demo-cluster: a fleet of three in %s\n", dir)
	d.clusterStep(1, "etcd and three agents, each with a hostpath CSI plugin")
	etcdURL, stopEtcd, err := d.startEtcd()
	if err == nil {
		err = d.runCluster(etcdURL)
		d.stopAll() // the agents leave the fleet while etcd still answers
		stopEtcd()
	}
	if !keep {
		os.RemoveAll(dir)
	}
	if err != nil {
		return fmt.Errorf("demo-cluster failed: %w (run with -keep to read the agents' logs)", err)
	}
	d.say("\nThe catalog stayed right through a race and a dead node, in %s. All stopped cleanly.\n", time.Since(start).Round(time.Millisecond))
	return nil
}

func (d *demo) clusterStep(n int, title string) { d.say("\n[%d/5] %s\n", n, title) }

func (d *demo) runCluster(etcdURL string) error {
	for _, n := range clusterNodes {
		if err := d.startClusterAgent(n, etcdURL); err != nil {
			return err
		}
	}
	if err := d.waitFor("the three agents answer", func() bool {
		for _, n := range clusterNodes {
			if d.agentClient(n).call(context.Background(), "GET", "/v1/health", nil, nil, nil) != nil {
				return false
			}
		}
		return true
	}); err != nil {
		return err
	}
	ctx := context.Background()
	vol := volumePath("default", "shared", "")
	d.clusterStep(2, "register volume shared (single-node-writer) through n1")
	var v api.VolumeJSON
	if err := d.agentClient("n1").call(ctx, "POST", "/v1/volumes", nil, api.VolumeBody{ID: "shared", PluginID: "hp",
		AccessMode: "single-node-writer", AttachmentMode: "file-system"}, &v); err != nil {
		return err
	}
	if err := d.waitFor("every agent sees it schedulable, with the plugin healthy on 3 nodes", func() bool {
		return d.everyAgent(func(v api.VolumeJSON) bool { return v.Schedulable && v.NodesHealthy == 3 })
	}); err != nil {
		return err
	}

	d.clusterStep(3, "n2 and n3 claim it for writing at the same moment")
	winner, loser, err := d.race(ctx, vol)
	if err != nil {
		return err
	}
	d.say("      %s won; %s was refused: a single-node-writer volume has one writer in the fleet\n", winner, loser)

	d.clusterStep(4, "kill -9 the winner, "+winner)
	if err := d.procs["agent-"+winner].Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	_ = d.procs["agent-"+winner].Wait()
	delete(d.procs, "agent-"+winner)
	d.say("      killed %s\n", winner)
	if err := d.waitFor("n1 counts the plugin on 2 nodes once "+winner+"'s lease ran out, and the claim of web-"+winner+" stays", func() bool {
		got, err := d.volume("n1")
		return err == nil && got.NodesHealthy == 2 && slices.Equal(got.WriteClaims, []string{"web-" + winner})
	}); err != nil {
		return err
	}

	d.clusterStep(5, loser+" tries again while the dead node's claim stands; then the fleet's GC frees it")
	err = d.agentClient(loser).call(ctx, "POST", vol+"/claim", nil, api.AllocBody{AllocID: "web-" + loser}, nil)
	if err == nil {
		return fmt.Errorf("%s's second claim was granted beside web-%s's: two writers", loser, winner)
	}
	d.say("      refused, as it must be: %v\n", err)
	if err := d.waitFor("the GC freed the claim of web-"+winner+" once "+winner+" was down past its grace (5s)", func() bool {
		got, err := d.volume("n1")
		return err == nil && len(got.WriteClaims) == 0
	}); err != nil {
		return err
	}
	if err := d.agentClient(loser).call(ctx, "POST", vol+"/claim", nil, api.AllocBody{AllocID: "web-" + loser}, nil); err != nil {
		return fmt.Errorf("%s's claim after the GC: %w", loser, err)
	}
	return d.waitFor("n1 and "+loser+" agree: web-"+loser+" is now the one writer", func() bool {
		a, errA := d.volume("n1")
		b, errB := d.volume(loser)
		want := []string{"web-" + loser}
		return errA == nil && errB == nil && slices.Equal(a.WriteClaims, want) && slices.Equal(b.WriteClaims, want)
	})
}

// startEtcd runs an etcd member in-process on free loopback ports.
func (d *demo) startEtcd() (string, func(), error) {
	client, peer := &url.URL{Scheme: "http", Host: freeLoopback()}, &url.URL{Scheme: "http", Host: freeLoopback()}
	e, err := embedded.Start(embedded.Config{Dir: filepath.Join(d.dir, "etcd"), Client: client, Peer: peer})
	if err != nil {
		return "", nil, err
	}
	d.say("      etcd serves %s\n", client)
	return client.String(), e.Close, nil
}

// startClusterAgent starts node n's agent and its hostpath plugin.
func (d *demo) startClusterAgent(n, etcdURL string) error {
	data := filepath.Join(d.dir, n)
	if err := d.startProcess("agent-"+n, "agent", "-data-dir", data, "-node-id", n,
		"-cluster-etcd", etcdURL, "-cluster-address", freeLoopback(), "-cluster-insecure",
		"-cluster-lease-ttl", "3s", "-cluster-gc-interval", "1s", "-cluster-gc-grace", "5s", "-cluster-fence-margin", "1s",
		"-fingerprint-interval", "500ms", "-resync-interval", "5s"); err != nil {
		return err
	}
	args := []string{"-endpoint", filepath.Join(data, "plugins", "hp.sock"), "-name", "hp", "-node-id", n,
		"-root", filepath.Join(data, "hostpath")}
	if !d.root {
		args = append(args, "-symlink-fallback")
	}
	return d.startProcess("hostpath-"+n, "hostpath-csi", args...)
}

// agentClient is node n's API client, one per node: the demo polls, and a
// client per request would leave its idle connections open until the
// agent's connection cap refused the next one.
func (d *demo) agentClient(n string) *client {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.clients == nil {
		d.clients = map[string]*client{}
	}
	if d.clients[n] == nil {
		d.clients[n] = newClient(filepath.Join(d.dir, n))
	}
	return d.clients[n]
}

// volume is the volume "shared" as agent n's catalog has it.
func (d *demo) volume(n string) (api.VolumeJSON, error) {
	var v api.VolumeJSON
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := d.agentClient(n).call(ctx, "GET", volumePath("default", "shared", ""), nil, nil, &v)
	return v, err
}

// everyAgent reports whether every running agent's view of the volume
// passes ok.
func (d *demo) everyAgent(ok func(api.VolumeJSON) bool) bool {
	for _, n := range clusterNodes {
		if v, err := d.volume(n); err != nil || !ok(v) {
			return false
		}
	}
	return true
}

// race sends n2's and n3's claims together and returns who won.
func (d *demo) race(ctx context.Context, vol string) (winner, loser string, err error) {
	var wg sync.WaitGroup
	errs := map[string]error{}
	var mu sync.Mutex
	for _, n := range []string{"n2", "n3"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := d.agentClient(n).call(ctx, "POST", vol+"/claim", nil, api.AllocBody{AllocID: "web-" + n}, nil)
			mu.Lock()
			errs[n] = err
			mu.Unlock()
		}()
	}
	wg.Wait()
	switch {
	case errs["n2"] == nil && errs["n3"] != nil:
		return "n2", "n3", nil
	case errs["n3"] == nil && errs["n2"] != nil:
		return "n3", "n2", nil
	}
	return "", "", fmt.Errorf("the race must have one winner: n2 said %v, n3 said %v", errs["n2"], errs["n3"])
}

// freeLoopback is a loopback host:port that was free a moment ago.
func freeLoopback() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "127.0.0.1:0"
	}
	defer l.Close()
	return l.Addr().String()
}
