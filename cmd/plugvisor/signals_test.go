package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
)

func TestOnlyASignalAfterTheGraceForcesExit(t *testing.T) {
	first := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name   string
		after  []time.Duration // when each later signal arrives
		exited int             // how many exits were called
	}{
		{"a repeat within a millisecond is ignored", []time.Duration{time.Millisecond}, 0},
		{"a repeat just inside the grace is ignored", []time.Duration{signalGrace - time.Nanosecond}, 0},
		{"a signal at the end of the grace forces exit", []time.Duration{signalGrace}, 1},
		{"a repeat, then a later signal, forces exit once", []time.Duration{0, 10 * time.Millisecond, 3 * time.Second}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			signals := make(chan os.Signal, len(tc.after))
			for range tc.after {
				signals <- syscall.SIGTERM
			}
			close(signals)
			// The clock tells each signal's arrival as it is read.
			read := 0
			clock := func() time.Time { read++; return first.Add(tc.after[read-1]) }
			exited := 0
			forceExitOnLaterSignal(signals, first, clock, hclog.NewNullLogger(), func() { exited++ })
			require.Equal(t, tc.exited, exited)
		})
	}
}

func TestTwoSignalsAtOnceStillShutDownCleanly(t *testing.T) {
	dir := dataDir(t)
	a := startAgent(t, dir)
	// What timeout(1) and a terminal's Ctrl-C to a process group do.
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, a.exitCode(t), a.stderr.String())
	require.Contains(t, a.stderr.String(), "agent stopped")
	require.NotContains(t, a.stderr.String(), "exiting now")
	_, err := os.Stat(filepath.Join(dir, "plugvisor.sock"))
	require.ErrorIs(t, err, os.ErrNotExist, "the clean shutdown removed the socket")
}

func TestASignalAfterTheGraceForcesExit(t *testing.T) {
	dir := dataDir(t)
	a := startAgent(t, dir)
	// A client trickling a body holds the API server's shutdown open.
	conn, err := net.Dial("unix", filepath.Join(dir, "plugvisor.sock"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST /v1/plugins HTTP/1.1\r\nHost: plugvisor\r\nContent-Type: application/json\r\n"+
		"Content-Length: 100\r\nExpect: 100-continue\r\n\r\n")
	require.NoError(t, err)
	line, err := bufio.NewReader(conn).ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(line, "HTTP/1.1 100"), "the handler is reading the body: %q", line)

	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	first := time.Now()
	require.Eventually(t, func() bool { return strings.Contains(a.stderr.String(), "shutting down") },
		20*time.Second, 10*time.Millisecond)
	time.Sleep(time.Until(first.Add(signalGrace + 100*time.Millisecond)))
	select {
	case <-a.done:
		t.Fatalf("the held request should keep the shutdown waiting: %s", a.stderr)
	default:
	}
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 1, a.exitCode(t), a.stderr.String())
	require.Contains(t, a.stderr.String(), "second signal: exiting now")
}

// exitCode waits for the agent to exit and returns its exit code.
func (a *agentProc) exitCode(t *testing.T) int {
	t.Helper()
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the agent did not exit: %s", a.stderr)
	}
	return a.cmd.ProcessState.ExitCode()
}
