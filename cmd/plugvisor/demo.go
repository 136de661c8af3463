package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/controller"
	"github.com/plugvisor/plugvisor/csi/volumes"
	cmdline "github.com/plugvisor/plugvisor/internal/cli"
	"github.com/plugvisor/plugvisor/internal/mountinfo"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
)

const demoLong = `A self-contained tour in a temp dir, nothing to set up. It starts an agent
in-process, two hostpath CSI plugins and a Docker volume plugin as processes,
and shows them discovered, registered and fingerprinted healthy; a newer
allocation taking over; a plugin killed with kill -9 going unhealthy and
recovering; a volume's whole life: created through the plugin's controller,
mounted for a writer, a second writer refused, a reader joining read-only,
the agent restarted on the same data dir, both unmounted from the records
that survived, and the volume deleted; the event stream as it happens; then
a clean shutdown and a summary.`

// demoTimeout bounds each wait of the demo; nothing should come close.
const demoTimeout = 30 * time.Second

// demoSteps is how many steps the tour has.
const demoSteps = 9

// demoVolume is the ID of the volume whose life the demo shows.
const demoVolume = "demo-db"

// demo holds the tour's state: the agent, the plugin processes, and what
// the event printer counted.
type demo struct {
	// clients are the cluster demo's API clients, by node.
	clients map[string]*client
	out     io.Writer
	mu      sync.Mutex // orders lines from the step and the event printer
	dir     string
	self    string
	agent   *agent.Agent
	logger  hclog.Logger
	procs   map[string]*exec.Cmd
	root    bool
	// unfollow stops following the current agent's events.
	unfollow context.CancelFunc

	events, healthChanges, takeovers atomic.Int64
	mounts, refused                  int
	// mounted lists the allocs that have the demo's volume mounted.
	mounted []string
}

func newDemoCmd() *cobra.Command {
	var keep, verbose bool
	cmd := &cobra.Command{
		Use:     "demo",
		Short:   "run a self-contained demo in a temp dir",
		Long:    demoLong,
		Example: "  plugvisor demo          # or: make demo\n  plugvisor demo -keep -v",
		Args:    cmdline.Args("", "plugvisor demo"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(keep, verbose, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the temp dir afterwards")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "show the agent's own logs on stderr")
	return cmd
}

func runDemo(keep, verbose bool, stdout, stderr io.Writer) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "pvdemo")
	if err != nil {
		return err
	}
	d := &demo{out: stdout, dir: dir, self: self, procs: map[string]*exec.Cmd{}, root: os.Geteuid() == 0,
		logger: hclog.NewNullLogger()}
	if verbose {
		d.logger = hclog.New(&hclog.LoggerOptions{Name: "plugvisor", Level: hclog.Info, Output: stderr})
	}
	start := time.Now()
	d.say("plugvisor demo: a tour in %s\n", dir)
	err = d.run()
	d.stopAll()
	if !keep {
		os.RemoveAll(dir)
	}
	if err != nil {
		return fmt.Errorf("demo failed: %w", err)
	}
	d.say("\nSummary: %d registry events, %d health changes, %d takeovers (controller and node), %d mounts, %d refused writer, in %s. All stopped cleanly.\n",
		d.events.Load(), d.healthChanges.Load(), d.takeovers.Load(), d.mounts, d.refused, time.Since(start).Round(time.Millisecond))
	return nil
}

func (d *demo) say(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, format, args...)
}

func (d *demo) step(n int, title string) { d.say("\n[%d/%d] %s\n", n, demoSteps, title) }

// waitFor polls cond (cheap snapshot reads) until it holds, then prints ok.
func (d *demo) waitFor(what string, cond func() bool) error {
	start := time.Now()
	for !cond() {
		if time.Since(start) > demoTimeout {
			return fmt.Errorf("timed out after %s waiting until %s", demoTimeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.say("      ok: %s (%s)\n", what, time.Since(start).Round(time.Millisecond))
	return nil
}

// startAgent starts an agent in-process on the demo's data dir and follows
// its events.
func (d *demo) startAgent() error {
	a, err := agent.Start(agent.Config{
		DataDir: d.dir, Logger: d.logger, NodeID: "demo-node",
		FingerprintInterval: 300 * time.Millisecond, ResyncInterval: 5 * time.Second,
	})
	if err != nil {
		return err
	}
	d.agent = a
	ctx, cancel := context.WithCancel(context.Background())
	d.unfollow = cancel
	return d.followEvents(ctx)
}

// stopAgent stops following the agent's events and shuts it down.
func (d *demo) stopAgent() error {
	if d.agent == nil {
		return nil
	}
	d.unfollow()
	ctx, done := context.WithTimeout(context.Background(), demoTimeout)
	defer done()
	err := d.agent.Shutdown(ctx)
	d.agent = nil
	return err
}

func (d *demo) run() error {
	d.step(1, "Starting the agent in-process")
	if err := d.startAgent(); err != nil {
		return err
	}
	a := d.agent
	d.say("      API on %s; watching %s\n", a.SocketPath(), a.PluginDir())
	ctx := context.Background()

	d.step(2, "Starting two hostpath CSI plugins and a Docker volume plugin (discovery finds their sockets)")
	for _, name := range []string{"hostpath-a", "hostpath-b"} {
		if err := d.startHostpath(name, name); err != nil {
			return err
		}
	}
	if err := d.startProcess("docker-local", "docker-volume-plugin",
		"-socket", d.socket("docker-local"), "-root", filepath.Join(d.dir, "docker-volumes")); err != nil {
		return err
	}
	for _, name := range []string{"hostpath-a", "hostpath-b"} {
		if err := d.waitFor(name+" is registered and fingerprinted healthy", func() bool { return d.healthy(name, "") }); err != nil {
			return err
		}
	}
	if err := d.waitFor("docker-local is registered as docker-volume and healthy", d.dockerHealthy); err != nil {
		return err
	}

	d.step(3, "Starting a newer allocation of hostpath-a: it takes over")
	old, _ := a.Registry().Snapshot().Current(csi.TypeNode, "hostpath-a")
	if err := d.startHostpath("hostpath-a-v2", "hostpath-a"); err != nil {
		return err
	}
	if err := d.waitFor("the new allocation is current and healthy, the old instance replaced", func() bool {
		return d.healthy("hostpath-a", old.GetAllocId())
	}); err != nil {
		return err
	}
	d.say("      stopping the old allocation (SIGTERM): its socket goes, discovery deregisters it\n")
	d.stop("hostpath-a")
	if err := d.waitFor("the old allocation is deregistered", func() bool {
		_, ok := a.Registry().Snapshot().ForAlloc(csi.TypeNode, "hostpath-a", old.GetAllocId())
		return !ok
	}); err != nil {
		return err
	}

	d.step(4, "kill -9 hostpath-b: it goes unhealthy, then recovers when restarted, with no help")
	d.procs["hostpath-b"].Process.Signal(syscall.SIGKILL)
	_ = d.procs["hostpath-b"].Wait()
	delete(d.procs, "hostpath-b")
	if err := d.waitFor("hostpath-b is unhealthy", func() bool { return d.unhealthy("hostpath-b") }); err != nil {
		return err
	}
	d.say("      why: %s\n", d.description("hostpath-b"))
	if err := d.startHostpath("hostpath-b", "hostpath-b"); err != nil {
		return err
	}
	if err := d.waitFor("hostpath-b is healthy again", func() bool { return d.healthy("hostpath-b", "") }); err != nil {
		return err
	}

	d.step(5, "A volume: create it through hostpath-a's controller, mount it for a writer, let a reader join")
	if err := d.mountVolume(ctx); err != nil {
		return err
	}

	d.step(6, "Restarting the agent on the same data dir: the plugins and the mounts stay")
	if err := d.restartAgent(ctx); err != nil {
		return err
	}

	d.step(7, "After the restart: unmount the allocs from the records that survived, then delete the volume")
	if err := d.unmountAndDelete(ctx); err != nil {
		return err
	}

	d.step(8, "The event stream: every line marked 'event' above arrived as it happened")
	d.say("      %d registry events, %d health changes so far\n", d.events.Load(), d.healthChanges.Load())

	d.step(9, "Shutting down: plugins, then the agent (final fingerprints mark plugins unhealthy)")
	for name := range d.procs {
		d.stop(name)
	}
	return d.stopAgent()
}

func (d *demo) socket(name string) string { return filepath.Join(d.agent.PluginDir(), name+".sock") }

func (d *demo) startHostpath(proc, name string) error {
	args := []string{"-endpoint", d.socket(proc), "-name", name, "-node-id", "demo-node",
		"-root", filepath.Join(d.dir, "hostpath-"+name), "-mode", "monolith"}
	if !d.root {
		args = append(args, "-symlink-fallback")
	}
	return d.startProcess(proc, "hostpath-csi", args...)
}

func (d *demo) startProcess(name, command string, args ...string) error {
	cmd := exec.Command(d.self, append([]string{command}, args...)...)
	logFile, err := os.Create(filepath.Join(d.dir, name+".log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return err
	}
	d.procs[name] = cmd
	d.say("      started %s (pid %d): %s %s\n", name, cmd.Process.Pid, filepath.Base(d.self), command)
	return nil
}

func (d *demo) stop(name string) {
	if cmd, ok := d.procs[name]; ok {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		delete(d.procs, name)
	}
}

func (d *demo) stopAll() {
	for name := range d.procs {
		d.stop(name)
	}
	_ = d.stopAgent()
}

// fingerprint returns the CSI node instance's latest fingerprint of name.
func (d *demo) fingerprint(name string) *messages.CSIFingerprint {
	for _, f := range d.agent.CSI().Plugins() {
		if f.GetType() == csi.TypeNode && f.GetName() == name {
			return f
		}
	}
	return nil
}

// healthy: the node instance of name serves the current allocation (not
// notAlloc) and is healthy.
func (d *demo) healthy(name, notAlloc string) bool {
	current, ok := d.agent.Registry().Snapshot().Current(csi.TypeNode, name)
	f := d.fingerprint(name)
	return ok && f != nil && f.GetHealthy() && f.GetAllocId() == current.GetAllocId() && current.GetAllocId() != notAlloc
}

// schedulable: the catalog counts a healthy controller and a healthy node
// plugin of name, so that its volumes may be claimed.
func (d *demo) schedulable(ctx context.Context, name string) bool {
	plugins, err := d.agent.Catalog().Plugins(ctx)
	if err != nil {
		return false
	}
	for _, p := range plugins {
		if p.ID == name {
			return p.ControllersHealthy > 0 && p.NodesHealthy > 0
		}
	}
	return false
}

func (d *demo) unhealthy(name string) bool {
	f := d.fingerprint(name)
	return f != nil && !f.GetHealthy()
}

func (d *demo) description(name string) string {
	if f := d.fingerprint(name); f != nil {
		return f.GetHealthDescription()
	}
	return ""
}

func (d *demo) dockerHealthy() bool {
	for _, p := range d.agent.DockerVolumes().Plugins() {
		if p.GetName() == "docker-local" && p.GetHealthy() {
			return true
		}
	}
	return false
}

// followEvents prints registry events and CSI health changes as they come.
func (d *demo) followEvents(ctx context.Context) error {
	sub, err := d.agent.Registry().Subscribe(ctx, "", registry.SubscribeOptions{})
	if err != nil {
		return err
	}
	go func() {
		for ev := range sub.C {
			d.events.Add(1)
			if reg, ok := ev.(*messages.PluginRegistered); ok && reg.GetPrevious() != nil {
				d.takeovers.Add(1)
			}
			d.say("      event #%d %s %s %s alloc %s\n", ev.GetSequence(), api.KindOf(ev),
				ev.GetPlugin().GetType(), ev.GetPlugin().GetName(), ev.GetPlugin().GetAllocId())
		}
	}()
	system := d.agent.System()
	health := system.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch msg := c.Message().(type) {
		case *actor.Started:
			c.Send(d.agent.CSI().PID(), &messages.SubscribeCSI{Subscriber: c.Self()})
		case *messages.CSIPluginHealthChanged:
			d.healthChanges.Add(1)
			state := "unhealthy"
			if msg.GetHealthy() {
				state = "healthy"
			}
			d.say("      event %s %s alloc %s is %s: %s\n", msg.GetType(), msg.GetName(), msg.GetAllocId(), state, msg.GetDescription())
		}
	}))
	go func() { <-ctx.Done(); system.Root.Stop(health) }()
	return nil
}

// mountVolume creates the demo's volume through hostpath-a's controller,
// mounts it for a writer that writes a file, shows a second writer
// refused, and mounts it read-only for a reader that reads the file.
func (d *demo) mountVolume(ctx context.Context) error {
	if err := d.waitFor("the catalog counts hostpath-a's controller and node healthy", func() bool { return d.schedulable(ctx, "hostpath-a") }); err != nil {
		return err
	}
	vol, err := d.agent.Controller().Create(ctx, controller.CreateRequest{
		ID: demoVolume, PluginID: "hostpath-a", RequiredBytes: 1 << 20,
		AccessMode: model.AccessModeSingleNodeWriter, AttachmentMode: model.AttachmentModeFileSystem,
	})
	if err != nil {
		return err
	}
	d.say("      created volume %s on plugin hostpath-a through its controller (CreateVolume): plugin volume %s, %d bytes, single-node-writer\n",
		vol.ID, vol.PluginVolumeID(), vol.CapacityBytes)
	manager := d.agent.Volumes()
	writer, err := manager.Mount(ctx, "", demoVolume, "web-1", false)
	if err != nil {
		return err
	}
	d.mounts++
	d.mounted = append(d.mounted, "web-1")
	if err := os.WriteFile(filepath.Join(writer.TargetPath, "hello.txt"), []byte("written through the mount\n"), 0o644); err != nil {
		return fmt.Errorf("write through the mount: %w", err)
	}
	d.say("      mounted %s for writer alloc web-1 (claim, stage, publish), %s at %s, and wrote hello.txt through it\n",
		demoVolume, d.how(), writer.TargetPath)
	_, err = manager.Mount(ctx, "", demoVolume, "web-2", false)
	if !errors.Is(err, volumes.ErrClaimRefused) {
		return fmt.Errorf("a second writer should be refused, got: %v", err)
	}
	d.refused++
	d.say("      refused a second writer, web-2: %v\n", err)
	reader, err := manager.Mount(ctx, "", demoVolume, "report-1", true)
	if err != nil && !d.root {
		d.say("      reader alloc report-1 cannot join read-only without root: the symlink fallback cannot enforce read-only, so the plugin refuses (%v)\n", err)
		return nil
	}
	if err != nil {
		return err
	}
	d.mounts++
	d.mounted = append(d.mounted, "report-1")
	got, err := os.ReadFile(filepath.Join(reader.TargetPath, "hello.txt"))
	if err != nil {
		return fmt.Errorf("read through the read-only mount: %w", err)
	}
	d.say("      reader alloc report-1 joined %s read-only on the same stage (publish only) at %s, and read hello.txt: %q\n",
		demoVolume, reader.TargetPath, string(got))
	return nil
}

// how says how the hostpath plugin mounts.
func (d *demo) how() string {
	if d.root {
		return "bind-mounted"
	}
	return "linked (not root: the hostpath plugin falls back to a symlink instead of a bind mount)"
}

// restartAgent stops the agent and starts a new one on the same data dir,
// then shows the volume's durable record as the new agent found it.
func (d *demo) restartAgent(ctx context.Context) error {
	if err := d.stopAgent(); err != nil {
		return err
	}
	d.say("      stopped the agent; the plugin processes keep running and %s stays mounted\n", demoVolume)
	if err := d.startAgent(); err != nil {
		return err
	}
	d.say("      started a new agent in-process on the same data dir, %s\n", d.dir)
	if err := d.waitFor("the new agent fingerprinted hostpath-a healthy", func() bool { return d.healthy("hostpath-a", "") }); err != nil {
		return err
	}
	st, err := d.agent.Volumes().Status(ctx, "", demoVolume)
	if err != nil {
		return err
	}
	published := slices.Sorted(maps.Keys(st.Record.GetPublishes()))
	if !slices.Equal(published, slices.Sorted(slices.Values(d.mounted))) {
		return fmt.Errorf("the new agent's record of %s should hold the publishes for %v, holds %v", demoVolume, d.mounted, published)
	}
	d.say("      the new agent's durable record of %s holds its stage (%s) and the publishes for %s\n",
		demoVolume, st.Record.GetStage().GetState(), strings.Join(published, " and "))
	return nil
}

// unmountAndDelete unmounts the writer and the reader through the new
// agent, checks that nothing stays mounted, and deletes the volume.
func (d *demo) unmountAndDelete(ctx context.Context) error {
	manager := d.agent.Volumes()
	for i, alloc := range d.mounted {
		if err := manager.Unmount(ctx, "", demoVolume, alloc); err != nil {
			return err
		}
		if rest := d.mounted[i+1:]; len(rest) > 0 {
			d.say("      unmounted %s for %s (unpublish, release its claim; the stage stays for %s)\n", demoVolume, alloc, strings.Join(rest, " and "))
		} else {
			d.say("      unmounted %s for %s (unpublish, unstage, release its claim), the last alloc on this node\n", demoVolume, alloc)
		}
	}
	mounted, err := mountinfo.PointsUnder(mountinfo.DefaultPath, d.dir)
	if err != nil {
		return err
	}
	if len(mounted) > 0 {
		return fmt.Errorf("still mounted after the last unmount: %v", slices.Sorted(maps.Keys(mounted)))
	}
	d.say("      nothing is mounted under %s\n", d.dir)
	if err := d.agent.Controller().Delete(ctx, "", demoVolume); err != nil {
		return err
	}
	d.say("      deleted volume %s on plugin hostpath-a (DeleteVolume) and from the catalog\n", demoVolume)
	return nil
}
