package moby_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	dockervolumes "github.com/plugvisor/plugvisor/dockervolume/volumes"
)

// Each test gives one sequence of inputs to dockerd's volume service and
// to plugvisor's, and writes down what each answered, one word a step:
// "ok", "no such volume", "in use", "not mounted" (plugvisor's
// ErrNotMounted) or the error. The two traces are then compared with the
// row of docs/docker.md's table of differences the test is named for.

// step runs one input and says what the service answered.
func step(s side, err error) string {
	switch {
	case err == nil:
		return "ok"
	case s.notFound(err):
		return "no such volume"
	case s.inUse(err):
		return "in use"
	case errors.Is(err, dockervolumes.ErrNotMounted):
		return "not mounted"
	}
	return err.Error()
}

// sequence is a list of inputs, run against one side.
type sequence func(t *testing.T, s side) []string

// bothRun runs seq against dockerd and against plugvisor, each with its own
// copy of the plugins, and returns their traces.
func bothRun(t *testing.T, seq sequence, ps ...plugin) (dockerdTrace, plugvisorTrace []string) {
	t.Helper()
	return seq(t, newDockerd(t, ps...)), seq(t, newPlugvisor(t, ps...))
}

// created creates name on driver, which must succeed, and returns the answer.
func created(t *testing.T, s side, name, driver string) vol {
	t.Helper()
	v, err := s.create(name, driver)
	require.NoError(t, err)
	return v
}

func TestBothCountMountsByIDAndRefuseToRemoveAVolumeInUse(t *testing.T) {
	d, p := bothRun(t, func(t *testing.T, s side) []string {
		created(t, s, "data", "local")
		again := created(t, s, "data", "local")
		require.Equal(t, vol{"data", "local", "local"}, again, "creating it again returns it")
		return []string{
			step(s, s.mount("data", "c1")),
			step(s, s.mount("data", "c2")),
			step(s, s.remove("data", false)),
			step(s, s.unmount("data", "c1")),
			step(s, s.remove("data", false)),
			step(s, s.unmount("data", "c2")),
			step(s, s.remove("data", false)),
			step(s, func() error { _, err := s.inspect("data"); return err }()),
		}
	})
	want := []string{"ok", "ok", "in use", "ok", "in use", "ok", "ok", "no such volume"}
	require.Equal(t, want, d, "dockerd")
	require.Equal(t, want, p, "plugvisor")
}

// Row "unmount by an ID that never mounted the volume": dockerd nil,
// plugvisor ErrNotMounted, and the real mount still held on both.
func TestAnUnmountByAnUnknownIDIsNilInDockerdAndRefusedByPlugvisor(t *testing.T) {
	d, p := bothRun(t, func(t *testing.T, s side) []string {
		created(t, s, "data", "local")
		return []string{
			step(s, s.mount("data", "c1")),
			step(s, s.unmount("data", "c2")),
			step(s, s.remove("data", false)),
		}
	})
	require.Equal(t, []string{"ok", "ok", "in use"}, d, "dockerd")
	require.Equal(t, []string{"ok", "not mounted", "in use"}, p, "plugvisor: stricter, and c1's mount still holds")
}

// Row "the same ID mounted twice, unmounted once": dockerd releases the
// ID's reference, plugvisor holds the volume until the second unmount.
func TestAnIDMountedTwiceUnmountedOnceIsReleasedByDockerdAndHeldByPlugvisor(t *testing.T) {
	d, p := bothRun(t, func(t *testing.T, s side) []string {
		created(t, s, "data", "local")
		trace := []string{
			step(s, s.mount("data", "c1")),
			step(s, s.mount("data", "c1")),
			step(s, s.unmount("data", "c1")),
			step(s, s.remove("data", false)),
		}
		if trace[3] != "ok" {
			trace = append(trace, step(s, s.unmount("data", "c1")), step(s, s.remove("data", false)))
		}
		return trace
	})
	require.Equal(t, []string{"ok", "ok", "ok", "ok"}, d, "dockerd: removed under the second mount's holder")
	require.Equal(t, []string{"ok", "ok", "ok", "in use", "ok", "ok"}, p, "plugvisor: stricter, removable after the second unmount")
}

// Row "a create without a driver": local on both.
func TestACreateWithoutADriverIsLocalOnBoth(t *testing.T) {
	d, p := bothRun(t, func(t *testing.T, s side) []string {
		v := created(t, s, "data", "")
		got, err := s.inspect("data")
		require.NoError(t, err)
		return []string{v.Driver, got.Driver}
	})
	require.Equal(t, []string{"local", "local"}, d, "dockerd")
	require.Equal(t, d, p, "plugvisor")
}

// Row "a create without a name": an anonymous volume named by 64 hex
// digits on both, a new one each time.
func TestACreateWithoutANameIsAnAnonymousVolumeOnBoth(t *testing.T) {
	hex64 := regexp.MustCompile(`^[0-9a-f]{64}$`)
	d, p := bothRun(t, func(t *testing.T, s side) []string {
		a := created(t, s, "", "")
		b := created(t, s, "", "local")
		got, err := s.inspect(a.Name)
		require.NoError(t, err)
		return []string{
			hex64.FindString(a.Name) + " " + a.Driver, hex64.FindString(b.Name) + " " + b.Driver,
			map[bool]string{true: "same", false: "new"}[a.Name == b.Name], got.Driver,
		}
	})
	require.Regexp(t, `^[0-9a-f]{64} local$`, d[0], "dockerd")
	require.Regexp(t, `^[0-9a-f]{64} local$`, p[0], "plugvisor")
	require.Equal(t, []string{"new", "local"}, d[2:], "dockerd")
	require.Equal(t, d[2:], p[2:], "plugvisor")
	require.Equal(t, len(d[1]), len(p[1]))
}

// Row "volume rm -f": no such volume is no error; the record goes though
// the driver refuses, whose error is the answer; a volume in use is still
// refused.
func TestForceRemoveIsTheSameOnBoth(t *testing.T) {
	failing := plugin{name: "flaky", scope: "local", removeErr: "the disk is on fire"}
	d, p := bothRun(t, func(t *testing.T, s side) []string {
		created(t, s, "data", "flaky")
		created(t, s, "busy", "local")
		trace := []string{
			step(s, s.remove("never", true)),
			driverSaid(s, s.remove("data", false)),
			step(s, func() error { _, err := s.inspect("data"); return err }()),
			driverSaid(s, s.remove("data", true)),
			step(s, func() error { _, err := s.inspect("data"); return err }()),
			step(s, s.mount("busy", "c1")),
			step(s, s.remove("busy", true)),
		}
		return trace
	}, failing)
	// The forced remove drops the record and still answers the driver's
	// error; the driver, which kept the volume, is asked for it again at
	// the next lookup and has it.
	want := []string{"ok", "the driver's error", "ok", "the driver's error", "ok", "ok", "in use"}
	require.Equal(t, want, d, "dockerd")
	require.Equal(t, want, p, "plugvisor")
}

// driverSaid is step, but "the driver's error" for failing's error.
func driverSaid(s side, err error) string {
	if err != nil && strings.Contains(err.Error(), "the disk is on fire") {
		return "the driver's error"
	}
	return step(s, err)
}

// Row "Scope in the create answer": the driver's, for a new volume and an
// existing one.
func TestTheCreateAnswerHasTheDriversScopeOnBoth(t *testing.T) {
	global := plugin{name: "cluster", scope: "global"}
	d, p := bothRun(t, func(t *testing.T, s side) []string {
		first := created(t, s, "shared", "cluster")
		again := created(t, s, "shared", "cluster")
		local := created(t, s, "mine", "local")
		return []string{first.Scope, again.Scope, local.Scope}
	}, global)
	require.Equal(t, []string{"global", "global", "local"}, d, "dockerd")
	require.Equal(t, d, p, "plugvisor")
}

// Row "inspect while the volume's driver is gone" (a driver that stops
// answering once it served): both try it again with moby's backoff, 1, 2,
// 4 and 8 s, until the next wait would end past 30 s (pkg/plugins' client,
// and dockervolume.Client); then dockerd fails, and plugvisor answers the
// record with the driver's error in it.
func TestInspectWhileTheDriverIsGoneFailsInDockerdAndAnswersTheRecordInPlugvisor(t *testing.T) {
	gone := plugin{name: "gone", scope: "local", stopped: make(chan struct{})}
	d, p := newDockerd(t, gone), newPlugvisor(t, gone)
	created(t, d, "data", "gone")
	created(t, p, "data", "gone")
	close(gone.stopped)

	var dockerdErr, plugvisorErr error
	var info dockervolumes.Volume
	var both sync.WaitGroup
	both.Go(func() { _, dockerdErr = d.inspect("data") })
	both.Go(func() { info, plugvisorErr = p.volumes.Inspect(context.Background(), "data") })
	both.Wait()
	require.ErrorContains(t, dockerdErr, `error while checking if volume "data" exists in driver "gone"`, "dockerd")
	require.NoError(t, plugvisorErr, "plugvisor")
	require.Equal(t, "gone", info.Driver)
	require.True(t, info.Known, "the record")
	require.Contains(t, info.Error, "unreachable", "with the driver's error")
}
