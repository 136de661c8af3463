package hostpathtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"

	"github.com/plugvisor/plugvisor/csi/hostpath"
)

// BinaryPackage is the import path of the plugin's binary.
const BinaryPackage = "github.com/plugvisor/plugvisor/cmd/hostpath-csi"

// StartTimeout bounds how long StartProcess waits for the plugin to answer
// Probe, and Stop for it to exit.
const StartTimeout = 30 * time.Second

// build is the binary built once per test binary.
var build struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// BuildBinary builds cmd/hostpath-csi once per test binary (with -race when
// the tests run with it, so the build cache is shared) and returns its path.
// Main, or RemoveBinary from a TestMain of your own, removes it.
func BuildBinary(t testing.TB) string {
	t.Helper()
	build.once.Do(func() {
		build.err = buildBinary()
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.path
}

func buildBinary() error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("hostpathtest: the go command is needed to build %s: %w", BinaryPackage, err)
	}
	if build.dir, err = os.MkdirTemp("", "hostpath-csi-bin"); err != nil {
		return fmt.Errorf("hostpathtest: %w", err)
	}
	// Readable by all: a test may run the binary as another user.
	if err := os.Chmod(build.dir, 0o755); err != nil {
		return fmt.Errorf("hostpathtest: %w", err)
	}
	path := filepath.Join(build.dir, "hostpath-csi")
	args := []string{"build", "-o", path}
	if raceEnabled {
		args = append(args, "-race")
	}
	out, err := exec.Command(goTool, append(args, BinaryPackage)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("hostpathtest: go build %s: %w\n%s", BinaryPackage, err, out)
	}
	build.path = path
	return nil
}

// RemoveBinary removes the binary BuildBinary built, if any. Call it after
// all tests have run (Main does).
func RemoveBinary() {
	if build.dir != "" {
		_ = os.RemoveAll(build.dir)
	}
}

// ProcessConfig says how to run the plugin binary.
type ProcessConfig struct {
	// Endpoint is the unix socket path (-endpoint).
	Endpoint string
	// Driver is turned into the other flags by hostpath.Config.Args.
	Driver hostpath.Config
	// Credential, if set, runs the binary as another user (the test must be root).
	Credential *syscall.Credential
}

// Process is the plugin binary running as a child process.
type Process struct {
	// Endpoint is the socket path the process serves on.
	Endpoint string

	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error    // set before exited is closed
	output  *os.File // the process's stdout and stderr
}

// StartProcess builds the binary if needed, starts it with cfg and waits
// until it answers Probe. t.Cleanup kills the process (if it still runs),
// waits for it, and logs its output if the test failed.
func StartProcess(t testing.TB, cfg ProcessConfig) *Process {
	t.Helper()
	bin := BuildBinary(t)
	cmd := exec.Command(bin, append([]string{"-endpoint=" + cfg.Endpoint}, cfg.Driver.Args()...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cfg.Credential}
	output, err := os.CreateTemp("", "hostpath-csi-*.log")
	if err != nil {
		t.Fatalf("hostpathtest: %v", err)
	}
	t.Cleanup(func() {
		_ = output.Close()
		_ = os.Remove(output.Name())
	})
	p := &Process{Endpoint: cfg.Endpoint, cmd: cmd, exited: make(chan struct{}), output: output}
	cmd.Stdout, cmd.Stderr = output, output
	if err := cmd.Start(); err != nil {
		t.Fatalf("hostpathtest: start %s: %v", bin, err)
	}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("hostpath-csi (pid %d) output:\n%s", cmd.Process.Pid, p.Output())
		}
	})
	if err := p.waitReady(Dial(t, cfg.Endpoint)); err != nil {
		t.Fatalf("hostpathtest: %v\noutput:\n%s", err, p.Output())
	}
	return p
}

// waitReady waits until the process answers Probe, and fails early if it exits.
func (p *Process) waitReady(conn *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	go func() {
		select {
		case <-p.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	_, err := csi.NewIdentityClient(conn).Probe(ctx, &csi.ProbeRequest{}, grpc.WaitForReady(true))
	select {
	case <-p.exited:
		return fmt.Errorf("hostpath-csi exited before answering Probe: %v", p.waitErr)
	default:
	}
	if err != nil {
		return fmt.Errorf("hostpath-csi did not answer Probe on %s: %w", p.Endpoint, err)
	}
	return nil
}

// Kill kills the process with SIGKILL (kill -9) and waits for it. Killing a
// process that has exited does nothing.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill() // fails only when the process has exited already
	<-p.exited
}

// Stop sends SIGTERM and returns how the process exited: nil for a clean
// exit. A process still running after StartTimeout is killed.
func (p *Process) Stop() error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("hostpathtest: signal: %w", err)
	}
	select {
	case <-p.exited:
		return p.waitErr
	case <-time.After(StartTimeout):
		p.Kill()
		return fmt.Errorf("hostpathtest: hostpath-csi did not exit within %v of SIGTERM; killed it", StartTimeout)
	}
}

// Wait waits for the process to exit and returns how it exited.
func (p *Process) Wait() error {
	<-p.exited
	return p.waitErr
}

// Output returns what the process wrote to stdout and stderr so far.
func (p *Process) Output() string {
	data, err := os.ReadFile(p.output.Name())
	if err != nil {
		return fmt.Sprintf("(output unreadable: %v)", err)
	}
	return string(data)
}
