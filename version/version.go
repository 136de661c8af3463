// Package version says which build of plugvisor is running: the release,
// the commit it was built from and the Go toolchain. The agent puts it in
// /v1/health and every binary prints it with `version` and `-version`.
//
// `make build` sets Version and Commit at link time from git, and `make
// release` sets the release. A binary built without them (`go install` or
// `go build`) reports what Go stamped into it: the module version (a
// release for `go install ...@v0.2.0`, a pseudo-version in a checkout),
// and the VCS revision, marked "-dirty" when the checkout had changes.
// Where Go stamped no version either (a tree outside git, or
// -buildvcs=false), it reports Release with "+devel": the release this
// source is, or follows.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Release is the last release of this source tree, as its CHANGELOG.md
// names it: `make release VERSION=x.y.z` refuses a version that is not
// this one, so it is raised with each release.
const Release = "v0.2.0"

// Version is the release, set at link time with
// -ldflags "-X github.com/plugvisor/plugvisor/version.Version=v1.2.3".
// A build without it reports the module version, or Release+"+devel".
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
	bi, _ := debug.ReadBuildInfo()
	return fromBuild(Version, Commit, bi)
}

// fromBuild prefers what the linker set, then the build information bi
// (nil when the binary has none), then Release+"+devel" and "unknown".
func fromBuild(linkedVersion, linkedCommit string, bi *debug.BuildInfo) Info {
	info := Info{Version: linkedVersion, Commit: linkedCommit, GoVersion: runtime.Version()}
	if bi != nil && info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		info.Version = bi.Main.Version
	}
	if bi != nil && info.Commit == "" {
		info.Commit = stampedCommit(bi.Settings)
	}
	if info.Version == "" {
		info.Version = Release + "+devel"
	}
	if info.Commit == "" {
		info.Commit = "unknown"
	}
	return info
}

// stampedCommit is the vcs.revision Go stamped, with "-dirty" when
// vcs.modified says the checkout had changes, or "" when there is none.
func stampedCommit(settings []debug.BuildSetting) string {
	var revision, modified string
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if revision != "" && modified == "true" {
		return revision + "-dirty"
	}
	return revision
}

// String is the one line `plugvisor version` prints.
func (i Info) String() string {
	return fmt.Sprintf("plugvisor %s (commit %s, %s)", i.Version, i.Commit, i.GoVersion)
}
