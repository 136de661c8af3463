package hostpath_test

import (
	"flag"
	"path/filepath"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
)

// TestSanity runs the CSI conformance suite (csi-sanity) against two drivers
// served in-process on unix sockets: one in the default mode, and one with
// AttachRequired, where the suite also exercises ControllerPublishVolume,
// passes its publish context to the node and checks the node's attach limit.
// As root the drivers bind-mount; as any other user the symlink fallback
// publishes, so the suite passes either way. Ginkgo runs one suite per test
// binary, so both drivers' specs are registered into that one suite.
func TestSanity(t *testing.T) {
	if reason := ginkgoRefuses(); reason != "" {
		t.Skipf("csi-sanity runs on Ginkgo, which would exit this test binary: %s; run with -count=1 and without -parallel", reason)
	}
	var contexts []*sanity.TestContext
	for _, attach := range []bool{false, true} {
		dir := hostpathtest.TempDir(t)
		srv := hostpathtest.Serve(t, hostpath.Config{
			Root:            filepath.Join(dir, "root"),
			NodeID:          "sanity-node",
			MaxVolumes:      8,
			SymlinkFallback: true,
			AttachRequired:  attach,
			Logger:          hostpathtest.Logger(t),
		})
		cfg := sanity.NewTestConfig()
		cfg.Address = srv.Endpoint
		cfg.TargetPath = filepath.Join(dir, "target")
		cfg.StagingPath = filepath.Join(dir, "staging")
		cfg.TestNodeVolumeAttachLimit = attach
		ginkgo.Describe(map[bool]string{false: "default mode", true: "attach required"}[attach], func() {
			contexts = append(contexts, sanity.GinkgoTest(&cfg))
		})
	}
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "hostpath CSI sanity")
	for _, sc := range contexts {
		sc.Finalize()
	}
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
