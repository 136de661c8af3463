package manager_test

import (
	"testing"

	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
)

// TestMain removes the hostpath plugin binary the tests built, and fails
// them if any goroutine outlives them.
func TestMain(m *testing.M) { hostpathtest.Main(m) }
