package version

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGetPrefersWhatTheLinkerSet(t *testing.T) {
	oldV, oldC := Version, Commit
	t.Cleanup(func() { Version, Commit = oldV, oldC })
	Version, Commit = "v9.8.7", "abc123"

	info := Get()

	require.Equal(t, Info{Version: "v9.8.7", Commit: "abc123", GoVersion: runtime.Version()}, info)
	require.Equal(t, "plugvisor v9.8.7 (commit abc123, "+runtime.Version()+")", info.String())
}

func TestGetNeverLeavesAFieldEmpty(t *testing.T) {
	oldV, oldC := Version, Commit
	t.Cleanup(func() { Version, Commit = oldV, oldC })
	Version, Commit = "", ""

	info := Get()

	require.NotEmpty(t, info.Version)
	require.NotEmpty(t, info.Commit)
	require.Equal(t, runtime.Version(), info.GoVersion)
}
