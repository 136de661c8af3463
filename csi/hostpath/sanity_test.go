package hostpath_test

import (
	"flag"
	"path/filepath"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"

	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
)

// TestSanity runs the CSI conformance suite (csi-sanity) against the driver
// served in-process on a unix socket. As root the driver bind-mounts; as any
// other user the symlink fallback publishes, so the suite passes either way.
func TestSanity(t *testing.T) {
	if reason := ginkgoRefuses(); reason != "" {
		t.Skipf("csi-sanity runs on Ginkgo, which would exit this test binary: %s; run with -count=1 and without -parallel", reason)
	}
	dir := hostpathtest.TempDir(t)
	srv := hostpathtest.Serve(t, hostpath.Config{
		Root:            filepath.Join(dir, "root"),
		NodeID:          "sanity-node",
		MaxVolumes:      8,
		SymlinkFallback: true,
		Logger:          hostpathtest.Logger(t),
	})
	cfg := sanity.NewTestConfig()
	cfg.Address = srv.Endpoint
	cfg.TargetPath = filepath.Join(dir, "target")
	cfg.StagingPath = filepath.Join(dir, "staging")
	sanity.Test(t, cfg)
}

// ginkgoRefuses says why Ginkgo's RunSpecs would refuse to run (and exit the
// process): it allows neither go test -count other than 1 nor -parallel.
func ginkgoRefuses() string {
	var reason string
	flag.Visit(func(f *flag.Flag) {
		switch {
		case f.Name == "test.count" && f.Value.String() != "1":
			reason = "go test -count=" + f.Value.String()
		case f.Name == "test.parallel":
			reason = "go test -parallel"
		}
	})
	return reason
}
