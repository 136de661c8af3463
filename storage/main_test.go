package storage_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs a helper process when the crash and lock tests re-execute
// this binary, and otherwise the tests, checking that none leaves a
// goroutine behind.
func TestMain(m *testing.M) {
	if mode := os.Getenv(helperModeEnv); mode != "" {
		os.Exit(runHelper(mode, os.Getenv(helperPathEnv)))
	}
	goleak.VerifyTestMain(m)
}
