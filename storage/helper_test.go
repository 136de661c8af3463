package storage_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/storage"
)

// The helper process is this test binary run again with helperModeEnv set;
// TestMain then calls runHelper instead of running tests.
const (
	helperModeEnv = "PLUGVISOR_STORAGE_HELPER"
	helperPathEnv = "PLUGVISOR_STORAGE_HELPER_PATH"

	// helperHold opens the store, prints "ready" and holds it until its
	// standard input closes.
	helperHold = "hold"
	// helperWrite opens the store and has helperWriters goroutines apply one
	// record at a time, printing each key once Apply has returned, until it
	// is killed (or helperWriteLimit passes).
	helperWrite = "write"

	helperWriters    = 4
	helperWriteLimit = 30 * time.Second
	crashBucket      = "crash"
)

// runHelper is the helper process's main; it returns the exit code.
func runHelper(mode, path string) int {
	s, err := storage.OpenBolt(path, storage.BoltOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer func() { _ = s.Close() }()
	switch mode {
	case helperHold:
		fmt.Println("ready")
		_, _ = io.Copy(io.Discard, os.Stdin)
		return 0
	case helperWrite:
		return writeUntilKilled(s)
	default:
		fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
		return 2
	}
}

// writeUntilKilled is the helperWrite mode.
func writeUntilKilled(s *storage.Bolt) int {
	b, err := s.Bucket(crashBucket)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	deadline := time.Now().Add(helperWriteLimit)
	value := make([]byte, 256)
	var wg sync.WaitGroup
	for w := range helperWriters {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				key := fmt.Sprintf("w%d-%08d", w, i)
				if err := b.Apply([]storage.Op{storage.Put([]byte(key), value)}); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(2)
				}
				// One write of a short line: pipe writes this small are atomic.
				_, _ = os.Stdout.WriteString(key + "\n")
			}
		})
	}
	wg.Wait()
	return 0
}

// helperProcess is a running helper with its output read line by line.
type helperProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines *bufio.Scanner
}

// startHelper runs this test binary as a helper in mode on path. Cleanup
// kills it (by its own pid) if the test has not waited for it.
func startHelper(t *testing.T, mode, path string) *helperProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperModeEnv+"="+mode, helperPathEnv+"="+path)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return &helperProcess{cmd: cmd, stdin: stdin, lines: bufio.NewScanner(stdout)}
}

// nextLine returns the helper's next line of output, failing the test when
// the helper has stopped writing.
func (h *helperProcess) nextLine(t *testing.T) string {
	t.Helper()
	require.True(t, h.lines.Scan(), "helper process stopped writing: %v", h.lines.Err())
	return h.lines.Text()
}
