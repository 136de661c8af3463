// Package version says which build of plugvisor is running: the release,
// the commit it was built from and the Go toolchain. The agent puts it in
// /v1/health and every binary prints it with `version` and `-version`.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is the release, set at link time with
// -ldflags "-X github.com/plugvisor/plugvisor/version.Version=v1.2.3".
// A build without it reports the module version, or "devel".
var Version = ""

// Commit is the commit the binary was built from, set at link time like
// Version. A build without it reports the VCS revision Go stamped, if any.
var Commit = ""

// Info is one build's identity.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"go_version"`
}

// Get returns this build's identity, filling what the linker did not set
// from the build information Go embeds.
func Get() Info {
	info := Info{Version: Version, Commit: Commit, GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if info.Version == "" && ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		info.Version = bi.Main.Version
	}
	if info.Commit == "" && ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				info.Commit = s.Value
			}
		}
	}
	if info.Version == "" {
		info.Version = "devel"
	}
	if info.Commit == "" {
		info.Commit = "unknown"
	}
	return info
}

// String is the one line `plugvisor version` prints.
func (i Info) String() string {
	return fmt.Sprintf("plugvisor %s (commit %s, %s)", i.Version, i.Commit, i.GoVersion)
}
