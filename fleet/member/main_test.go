package member_test

import (
	"fmt"
	"os"
	"testing"
)

// TestMain runs the tests, or one cluster member when the test binary runs
// as a child process of a test (see child_test.go). After the tests it
// stops the members the benchmarks share (see bench_test.go) and checks
// that no goroutine is left.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	code := m.Run()
	stopBenchClusters()
	if err := leaked(); code == 0 && err != nil {
		fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
		code = 1
	}
	os.Exit(code)
}
