package moby_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	dockervolumes "github.com/plugvisor/plugvisor/dockervolume/volumes"
)

// Row "remove after a failed mount": dockerd keeps the reference the
// container took before its mount failed, so the remove is "in use" until
// the container goes; plugvisor's mount ID is the reference and the mount
// at once, and a mount that failed holds nothing, so the remove goes
// through.
func TestARemoveAfterAFailedMountIsInUseInDockerdAndDoneByPlugvisor(t *testing.T) {
	flaky := plugin{name: "flaky", scope: "local", mountErr: "no such device"}
	d, p := bothRun(t, func(t *testing.T, s side) []string {
		created(t, s, "data", "flaky")
		mounted := "refused"
		if s.mount("data", "c1") == nil {
			mounted = "ok"
		}
		return []string{mounted, step(s, s.remove("data", false))}
	}, flaky)
	require.Equal(t, []string{"refused", "in use"}, d, "dockerd")
	require.Equal(t, []string{"refused", "ok"}, p, "plugvisor")
}

// Row "names dockerd's local driver refuses": dockerd checks a name
// against its local driver's rule for that driver only, and gives any
// other driver the name as it is; plugvisor refuses such a name for every
// driver.
func TestNamesOnlyDockerdsLocalDriverRefusesAreRefusedByPlugvisorForEveryDriver(t *testing.T) {
	other := plugin{name: "other", scope: "local"}
	names := []string{".", "..", "a b", "-x"}
	d, p := bothRun(t, func(t *testing.T, s side) []string {
		var trace []string
		for _, driver := range []string{"local", "other"} {
			for _, name := range names {
				_, err := s.create(name, driver)
				trace = append(trace, map[bool]string{true: driver + " ok", false: driver + " refused"}[err == nil])
			}
		}
		return trace
	}, other)
	require.Equal(t, []string{"local refused", "local refused", "local refused", "local refused",
		"other ok", "other ok", "other ok", "other ok"}, d, "dockerd")
	require.Equal(t, []string{"local refused", "local refused", "local refused", "local refused",
		"other refused", "other refused", "other refused", "other refused"}, p, "plugvisor")
}

// Row "a create without a name" (its label): an anonymous volume has the
// label com.docker.volume.anonymous, empty, on both; a named one has not.
func TestAnAnonymousVolumeIsLabelledOnBoth(t *testing.T) {
	d, p := bothRun(t, func(t *testing.T, s side) []string {
		a := created(t, s, "", "local")
		labels, err := s.labels(a.Name)
		require.NoError(t, err)
		value, ok := labels[dockervolumes.AnonymousLabel]
		named := created(t, s, "data", "local")
		namedLabels, err := s.labels(named.Name)
		require.NoError(t, err)
		_, namedOK := namedLabels[dockervolumes.AnonymousLabel]
		return []string{map[bool]string{true: "labelled " + value, false: "not labelled"}[ok],
			map[bool]string{true: "labelled", false: "not labelled"}[namedOK]}
	})
	require.Equal(t, []string{"labelled ", "not labelled"}, d, "dockerd")
	require.Equal(t, d, p, "plugvisor")
}

// Row "list while a volume's driver is gone": dockerd asks the driver it
// knows of, tries it again for 15 s (1+2+4+8, pkg/plugins' client), then
// answers with the volume from its store and a warning naming it;
// plugvisor answers the same at once, from the volume's record.
func TestAListWhileAVolumesDriverIsGoneWarnsOnBothAndWaitsInDockerdOnly(t *testing.T) {
	type listed struct {
		names    []string
		warnings int
	}
	run := func(s side, p plugin) listed {
		created(t, s, "shared", p.name)
		s.gone(p)
		names, warnings, err := s.list()
		require.NoError(t, err)
		return listed{names, len(warnings)}
	}
	gone := plugin{name: "gone", scope: "local", stopped: make(chan struct{})}
	d := run(newDockerd(t, gone), gone)
	gone.stopped = make(chan struct{})
	p := run(newPlugvisor(t, gone), gone)
	require.Equal(t, listed{[]string{"shared"}, 1}, d, "dockerd: listed from its store, with a warning")
	require.Equal(t, d, p, "plugvisor")
}
