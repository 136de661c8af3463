package chaos_test

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/internal/racelog"
)

// proc is a process of the fleet: etcd, an agent or a plugin. Its output
// is kept, and its end noted: a process that ends without the harness
// ending it is a crash.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *probe.LogBuffer
	done chan struct{}
	// ended is set before the harness ends the process (kill, stop), so
	// that its end is not a crash.
	ended atomic.Bool
	err   error
	races string
}

// start runs binary with args, writing race reports under races. Its
// output also goes to name.log beside races, after that of every earlier
// process of the name: a violation is read there, across restarts, in the
// files a failed run keeps.
func start(name, races string, args ...string) (*proc, error) {
	log, err := os.OpenFile(filepath.Join(filepath.Dir(races), name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	fmt.Fprintf(log, "==== %s started at %s: %s\n", name, time.Now().Format(time.RFC3339Nano), strings.Join(args, " "))
	cmd := exec.Command(binary, args...)
	p := &proc{name: name, cmd: cmd, out: &probe.LogBuffer{}, done: make(chan struct{}), races: races}
	cmd.Stdout = io.MultiWriter(p.out, log)
	cmd.Stderr = cmd.Stdout
	cmd.Env = append(os.Environ(), racelog.Env(races))
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	return p, nil
}

// alive reports whether the process runs.
func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill9 kills the process with SIGKILL and waits for it.
// pause stops the process (SIGSTOP): it holds its sockets and answers
// nothing, as a hung plugin does, until resume.
func (p *proc) pause() { _ = p.cmd.Process.Signal(syscall.SIGSTOP) }

// resume lets a paused process go on (SIGCONT).
func (p *proc) resume() { _ = p.cmd.Process.Signal(syscall.SIGCONT) }

func (p *proc) kill9() {
	p.ended.Store(true)
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM and waits up to grace, then kills it; it reports
// whether it stopped by itself, cleanly.
func (p *proc) stop(grace time.Duration) error {
	p.ended.Store(true)
	if !p.alive() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("%s exited with %v: %s", p.name, p.err, tail(p.out.String(), 20))
		}
		return nil
	case <-time.After(grace):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("%s did not stop within %v of SIGTERM: %s", p.name, grace, tail(p.out.String(), 20))
	}
}

// crashed says how the process ended when the harness did not end it, or
// "" while it runs or when the harness ended it.
func (p *proc) crashed() string {
	if p.alive() || p.ended.Load() || p.refusedToStart() {
		return ""
	}
	return fmt.Sprintf("%s exited by itself (%v): %s", p.name, p.err, tail(p.out.String(), 30))
}

// refusedToStart reports whether the process was an agent that could not
// join its fleet at start (etcd out of its reach): it says so and exits,
// which is what it must do, not a crash.
func (p *proc) refusedToStart() bool {
	return strings.HasPrefix(tail(p.out.String(), 1), "plugvisor agent: cluster mode:")
}

// trouble is what the process's output says went wrong at its worst: a
// panic, a fatal error, a data race.
func (p *proc) trouble() string {
	out := p.out.String()
	for _, sign := range []string{"panic:", "fatal error:", "SIGSEGV", "WARNING: DATA RACE"} {
		if i := strings.Index(out, sign); i >= 0 {
			return fmt.Sprintf("%s: %q in its output: %s", p.name, sign, out[max(0, i-200):min(len(out), i+2000)])
		}
	}
	return ""
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// procs is a set of processes that a test stops at its end.
type procs struct {
	mu  sync.Mutex
	all []*proc
}

func (ps *procs) add(p *proc) *proc {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.all = append(ps.all, p)
	return p
}
