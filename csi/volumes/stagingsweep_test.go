package volumes_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/supervisor/supervisortest"
)

// sweep runs the staging sweep of n's manager, whose clock is clock, and
// returns once it has run: the sweep's message is in the manager's mailbox
// before the status request that follows it.
func sweep(n *node, clock *supervisortest.FakeClock) {
	n.t.Helper()
	n.status("sweep") // the manager has started, and armed the sweep's timer
	clock.Advance(volumes.DefaultSweepInterval)
	n.status("sweep")
}

// mountInFlight starts a mount of volume id for alloc and returns once the
// plugin holds the mount's call of method, with the fault that holds it and
// the channel the mount's error comes on.
func mountInFlight(n *node, p *strictPlugin, method, id, alloc string) (*fault, <-chan error) {
	f := p.hold(method)
	mounted := make(chan error, 1)
	go func() {
		_, err := n.manager.Mount(ctx, "", id, alloc, false)
		mounted <- err
	}()
	<-f.reached
	return f, mounted
}

// TestTheStagingSweepKeepsTheDirectoryOfAMountInFlight holds a mount in
// NodeStageVolume, when the directory it staged at is still empty, and
// runs the staging sweep: that directory stays, and one that no volume
// uses goes. The mount then succeeds. After an unmount the directory
// stays for the next mount, until a sweep finds the volume idle.
func TestTheStagingSweepKeepsTheDirectoryOfAMountInFlight(t *testing.T) {
	clock := fakeClock()
	n, p := newStrictNode(t, clock, "vol")
	staging, stale := n.stagingDir("vol"), n.stagingDir("stale")
	require.NoError(t, os.MkdirAll(stale, 0o700))

	f, mounted := mountInFlight(n, p, "NodeStageVolume", "vol", "web-1")
	require.DirExists(t, staging, "the mount created its staging directory before NodeStageVolume")
	sweep(n, clock)
	require.NoDirExists(t, stale, "the sweep ran, and removed a directory no volume uses")
	require.DirExists(t, staging, "the sweep kept the directory of the mount in flight")
	p.unhang(f)
	require.NoError(t, <-mounted)
	require.Contains(t, mountsUnder(t, n.root), staging)

	require.NoError(t, n.manager.Unmount(ctx, "", "vol", "web-1"))
	require.DirExists(t, staging, "the staging directory stays for the next mount")
	require.NotContains(t, mountsUnder(t, n.root), staging)
	sweep(n, clock)
	require.NoDirExists(t, staging, "the sweep removed the directory of the idle volume")
	require.Empty(t, mountsUnder(t, n.root))
}

// TestTheStagingSweepAfterAKillRemovesOnlyWhatNoVolumeUses kills the
// agent with one volume mounted and another unmounted, whose staging
// directory stayed, and starts a new one: its first sweep removes the
// unmounted volume's directory and keeps the mounted one's, mounted. Both
// volumes then mount and unmount again, and the next sweep leaves nothing.
func TestTheStagingSweepAfterAKillRemovesOnlyWhatNoVolumeUses(t *testing.T) {
	clock := fakeClock()
	n, _ := newStrictNode(t, clock, "held", "idle")
	n.mount("held", "web-1")
	n.mount("idle", "web-2")
	require.NoError(t, n.manager.Unmount(ctx, "", "idle", "web-2"))
	require.DirExists(t, n.stagingDir("idle"))

	n.crash(nil)
	require.Equal(t, "published", n.settle("held").Record.GetPublishes()["web-1"].GetState())
	sweep(n, clock)
	require.NoDirExists(t, n.stagingDir("idle"), "the first sweep after the start removed what no volume uses")
	require.Contains(t, mountsUnder(t, n.root), n.stagingDir("held"), "and kept the staged volume's directory, mounted")

	for _, v := range [][2]string{{"idle", "web-2"}, {"held", "web-1"}} {
		if v[0] == "idle" {
			_, err := n.manager.Mount(ctx, "", v[0], v[1], false)
			require.NoError(t, err, "a volume whose directory the sweep removed mounts again")
		}
		require.NoError(t, n.manager.Unmount(ctx, "", v[0], v[1]))
	}
	sweep(n, clock)
	require.NoDirExists(t, n.stagingDir("idle"))
	require.NoDirExists(t, n.stagingDir("held"))
	require.Empty(t, mountsUnder(t, n.root))
}

// TestTheSweepRemovesAnAllocsDirectoriesOnlyOnceItIsIdle holds web-1's
// mount in NodePublishVolume, when the manager has made the target's
// parent and the plugin not yet the target, and runs the sweep: that
// parent stays, and the empty directory of an alloc with no mount goes.
// After web-1's unmount its directories stay until the next sweep, which
// removes them and keeps those of web-2, whose volume is still mounted.
func TestTheSweepRemovesAnAllocsDirectoriesOnlyOnceItIsIdle(t *testing.T) {
	clock := fakeClock()
	n, p := newStrictNode(t, clock, "vol", "other")
	allocDir := func(alloc string) string { return filepath.Join(n.root, "hp", volumes.PerAllocDirName, alloc) }
	require.NoError(t, os.MkdirAll(filepath.Join(allocDir("gone"), "default"), 0o700))
	other := n.mount("other", "web-2")

	f, mounted := mountInFlight(n, p, "NodePublishVolume", "vol", "web-1")
	parent := filepath.Join(allocDir("web-1"), "default")
	require.DirExists(t, parent, "the mount made its target's parent before NodePublishVolume")
	sweep(n, clock)
	require.NoDirExists(t, allocDir("gone"), "the sweep ran, and removed an alloc's directory no mount uses")
	require.DirExists(t, parent, "the sweep kept the directory of the mount in flight")
	p.unhang(f)
	require.NoError(t, <-mounted)

	require.NoError(t, n.manager.Unmount(ctx, "", "vol", "web-1"))
	require.DirExists(t, parent, "the unmount left the alloc's directory to the sweep")
	sweep(n, clock)
	require.NoDirExists(t, allocDir("web-1"), "the sweep removed the directory of the idle alloc")
	require.Equal(t, []string{other.TargetPath}, mountsUnder(t, allocDir("web-2")), "and kept the mounted alloc's")

	require.NoError(t, n.manager.Unmount(ctx, "", "other", "web-2"))
	sweep(n, clock)
	require.NoDirExists(t, allocDir("web-2"))
	require.Empty(t, mountsUnder(t, n.root))
}

// TestTheSweepRemovesAnIdleAllocsEmptyTargetsAndKeepsTheRest: the sweep
// removes an idle alloc's empty targets, then its namespaces' and its own
// directory, and keeps a target that is a mount point (and what is in the
// mount), one with a file, one with a directory in it (it never reads a
// target's contents), and their parents.
func TestTheSweepRemovesAnIdleAllocsEmptyTargetsAndKeepsTheRest(t *testing.T) {
	clock := fakeClock()
	n := newNode(t, func(c *volumes.Config) { c.Clock = clock })
	alloc := filepath.Join(n.root, "hp", volumes.PerAllocDirName, "left")
	empty, withFile, withDir, mounted := filepath.Join(alloc, "default", "vol"), filepath.Join(alloc, "other", "vol"), filepath.Join(alloc, "third", "vol"), filepath.Join(alloc, "default", "mounted")
	for _, d := range []string{empty, withFile, filepath.Join(withDir, "sub"), mounted} {
		require.NoError(t, os.MkdirAll(d, 0o700))
	}
	require.NoError(t, os.WriteFile(filepath.Join(withFile, "f"), nil, 0o600))
	src := t.TempDir()
	inner := filepath.Join(src, "inner")
	require.NoError(t, os.Mkdir(inner, 0o700))
	require.NoError(t, unix.Mount(src, mounted, "", unix.MS_BIND, ""))
	t.Cleanup(func() { _ = unix.Unmount(mounted, unix.MNT_DETACH) })

	sweep(n, clock)
	require.NoDirExists(t, empty, "the empty target went")
	require.FileExists(t, filepath.Join(withFile, "f"))
	require.DirExists(t, filepath.Join(withDir, "sub"), "the sweep does not go into a target")
	require.Equal(t, []string{mounted}, mountsUnder(t, n.root), "the mount point stays mounted")
	require.DirExists(t, inner, "the sweep does not go into a mount")

	require.NoError(t, unix.Unmount(mounted, 0))
	sweep(n, clock)
	require.NoDirExists(t, filepath.Join(alloc, "default"), "once unmounted, the target and its namespace go")
	require.FileExists(t, filepath.Join(withFile, "f"))
	require.DirExists(t, filepath.Join(withDir, "sub"))
}
