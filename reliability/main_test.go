//go:build reliability

package reliability_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// result is one row of the table.
type result struct {
	scenario, measured, verdict string
}

var (
	resultsMu sync.Mutex
	results   []result
)

// report adds a row; verdict is "pass", "FAIL" or "reported" (a row with no
// threshold of its own).
func report(scenario, verdict, format string, args ...any) {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	results = append(results, result{scenario, fmt.Sprintf(format, args...), verdict})
}

func verdict(ok bool) string {
	if ok {
		return "pass"
	}
	return "FAIL"
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pvr-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	bin = filepath.Join(dir, "plugvisor")
	build := exec.Command("go", "build", "-o", bin, "github.com/plugvisor/plugvisor/cmd/plugvisor")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build plugvisor:", err)
		os.Exit(2)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	table := renderTable()
	fmt.Print("\n" + table)
	if out := os.Getenv("RELIABILITY_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(table), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

func renderTable() string {
	var b strings.Builder
	b.WriteString("# Reliability\n\n")
	b.WriteString("Written by `make reliability`, which drives the agent as built (`plugvisor agent`) over its unix\n")
	b.WriteString("socket (the slow-client rows also over loopback TCP and TLS, on ports picked at run time). Every\n")
	b.WriteString("request loop is bounded; every unix socket is in a temp dir. A latency is measured on a new\n")
	b.WriteString("connection unless the row says otherwise.\n\n")
	fmt.Fprintf(&b, "Run on %s, %s/%s, %d CPUs, %s.\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
	b.WriteString("| scenario | what was measured | verdict |\n|---|---|---|\n")
	resultsMu.Lock()
	defer resultsMu.Unlock()
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", r.scenario, strings.ReplaceAll(r.measured, "|", "/"), r.verdict)
	}
	return b.String()
}
