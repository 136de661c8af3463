package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"

	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
)

const demoHelp = `Usage: plugvisor demo [-keep] [-v]

A self-contained tour in a temp dir, nothing to set up. It starts an agent
in-process, two hostpath CSI plugins and a Docker volume plugin as processes,
and shows them discovered, registered and fingerprinted healthy; a newer
allocation taking over; a plugin killed with kill -9 going unhealthy and
recovering; a volume created, claimed and mounted, and a second writer
refused; the event stream as it happens; then a clean shutdown and a summary.

Example:
  plugvisor demo          # or: make demo`

// demoTimeout bounds each wait of the demo; nothing should come close.
const demoTimeout = 30 * time.Second

// demo holds the tour's state: the agent, the plugin processes, and what
// the event printer counted.
type demo struct {
	out   io.Writer
	mu    sync.Mutex // orders lines from the step and the event printer
	dir   string
	self  string
	agent *agent.Agent
	procs map[string]*exec.Cmd
	root  bool

	events, healthChanges, takeovers atomic.Int64
	mounts, refused                  int
}

func runDemo(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("demo", demoHelp, stdout)
	keep := fs.Bool("keep", false, "keep the temp dir afterwards")
	verbose := fs.Bool("v", false, "show the agent's own logs on stderr")
	if err := parse(fs, args); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "pvdemo")
	if err != nil {
		return err
	}
	d := &demo{out: stdout, dir: dir, self: self, procs: map[string]*exec.Cmd{}, root: os.Geteuid() == 0}
	logger := hclog.NewNullLogger()
	if *verbose {
		logger = hclog.New(&hclog.LoggerOptions{Name: "plugvisor", Level: hclog.Info, Output: stderr})
	}
	start := time.Now()
	d.say("plugvisor demo: a tour in %s\n", dir)
	err = d.run(logger)
	d.stopAll()
	if !*keep {
		os.RemoveAll(dir)
	}
	if err != nil {
		return fmt.Errorf("demo failed: %w", err)
	}
	d.say("\nSummary: %d registry events, %d health changes, %d takeovers (controller and node), %d mount, %d refused writer, in %s. All stopped cleanly.\n",
		d.events.Load(), d.healthChanges.Load(), d.takeovers.Load(), d.mounts, d.refused, time.Since(start).Round(time.Millisecond))
	return nil
}

func (d *demo) say(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, format, args...)
}

func (d *demo) step(n int, title string) { d.say("\n[%d/7] %s\n", n, title) }

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

func (d *demo) run(logger hclog.Logger) error {
	d.step(1, "Starting the agent in-process")
	a, err := agent.Start(agent.Config{
		DataDir: d.dir, Logger: logger, NodeID: "demo-node",
		FingerprintInterval: 300 * time.Millisecond, ResyncInterval: 5 * time.Second,
	})
	if err != nil {
		return err
	}
	d.agent = a
	d.say("      API on %s; watching %s\n", a.SocketPath(), a.PluginDir())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := d.followEvents(ctx); err != nil {
		return err
	}

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

	d.step(5, "A volume: create it on hostpath-a, register it, claim and mount it; refuse a second writer")
	if err := d.volumes(ctx); err != nil {
		return err
	}

	d.step(6, "The event stream: every line marked 'event' above arrived as it happened")
	d.say("      %d registry events, %d health changes so far\n", d.events.Load(), d.healthChanges.Load())

	d.step(7, "Shutting down: plugins, then the agent (final fingerprints mark plugins unhealthy)")
	for name := range d.procs {
		d.stop(name)
	}
	shutdownCtx, done := context.WithTimeout(context.Background(), demoTimeout)
	defer done()
	err = a.Shutdown(shutdownCtx)
	d.agent = nil
	return err
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
	if d.agent != nil {
		_ = d.agent.Shutdown(context.Background())
		d.agent = nil
	}
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

// volumes creates a volume on hostpath-a, registers it in the catalog, and
// mounts it for one writer, then shows a second writer refused.
func (d *demo) volumes(ctx context.Context) error {
	current, _ := d.agent.Registry().Snapshot().Current(csi.TypeController, "hostpath-a")
	client, err := csi.Dial(ctx, current.GetConnection().GetSocketPath(), csi.Options{})
	if err != nil {
		return err
	}
	defer client.Close()
	created, err := client.CreateVolume(ctx, &csipb.CreateVolumeRequest{
		Name: "demo-db",
		VolumeCapabilities: []*csipb.VolumeCapability{{
			AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}},
	})
	if err != nil {
		return err
	}
	id := created.GetVolume().GetVolumeId()
	d.say("      created volume %s on hostpath-a (CreateVolume)\n", id)
	vol := model.NewCSIVolume(id, 0)
	vol.PluginID, vol.AccessMode, vol.AttachmentMode = "hostpath-a", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem
	if _, err := d.agent.Catalog().RegisterVolume(ctx, vol); err != nil {
		return err
	}
	d.say("      registered it in the catalog as single-node-writer\n")
	manager := d.agent.Volumes()
	res, err := manager.Mount(ctx, vol.Namespace, id, "web-1", false)
	if err != nil {
		return err
	}
	d.mounts++
	how := "bind-mounted"
	if !d.root {
		how = "linked (not root: the hostpath plugin falls back to a symlink instead of a bind mount)"
	}
	d.say("      claimed and mounted for alloc web-1: %s at %s\n", how, res.TargetPath)
	if err := os.WriteFile(filepath.Join(res.TargetPath, "hello.txt"), []byte("written through the mount\n"), 0o644); err != nil {
		return fmt.Errorf("write through the mount: %w", err)
	}
	d.say("      wrote hello.txt through the mount\n")
	_, err = manager.Mount(ctx, vol.Namespace, id, "web-2", false)
	if !errors.Is(err, volumes.ErrClaimRefused) {
		return fmt.Errorf("a second writer should be refused, got: %v", err)
	}
	d.refused++
	d.say("      refused a second writer, web-2: %v\n", err)
	if err := manager.Unmount(ctx, vol.Namespace, id, "web-1"); err != nil {
		return err
	}
	d.say("      unmounted web-1 (unpublish, unstage, release the claim)\n")
	return nil
}
