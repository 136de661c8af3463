package hostpath_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
)

func TestMain(m *testing.M) {
	hostpathtest.Main(m,
		// Ginkgo (run by csi-sanity) starts its interrupt handler in RunSpecs
		// and never stops it: it lives as long as the test binary.
		goleak.IgnoreTopFunction("github.com/onsi/ginkgo/v2/internal/interrupt_handler.(*InterruptHandler).registerForInterrupts.func2"),
	)
}
