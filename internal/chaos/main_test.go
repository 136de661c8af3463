package chaos_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/plugvisor/plugvisor/internal/testbin"
)

// binary is the plugvisor binary the fleet runs, built once, with the race
// detector when the tests have it.
var binary string

func TestMain(m *testing.M) {
	bin, cleanup, err := testbin.Build("github.com/plugvisor/plugvisor/cmd/plugvisor", raceEnabled)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = bin
	code := m.Run()
	cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}
