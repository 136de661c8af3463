package chaos_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// binary is the plugvisor binary the fleet runs, built once, with the race
// detector when the tests have it.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pvchaos")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "plugvisor")
	args := []string{"build", "-o", binary}
	if raceEnabled {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, "github.com/plugvisor/plugvisor/cmd/plugvisor")...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building plugvisor: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}
