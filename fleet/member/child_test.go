package member_test

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/member"
	"github.com/plugvisor/plugvisor/internal/racelog"
	"github.com/plugvisor/plugvisor/messages"
)

// Each member of the multi-member tests runs in a child process (this test
// binary again), for two reasons: a kill -9 is a real one, and protoactor's
// remote sets gRPC's global logger, unsynchronised, when it starts, which
// the race detector rightly reports when another member's gRPC already
// runs in the same process. The parent runs etcd and drives the children
// with one command a line on stdin; each answers one line on stdout.

const (
	childEnv     = "PLUGVISOR_MEMBER_CHILD" // the node ID
	childEtcdEnv = "PLUGVISOR_MEMBER_ETCD"  // comma-separated endpoints
	childTLSEnv  = "PLUGVISOR_MEMBER_TLS"   // a directory of ca.pem, member.pem, member-key.pem
	// childAddressEnv is the member's address (default 127.0.0.1:0).
	childAddressEnv = "PLUGVISOR_MEMBER_ADDRESS"
	// childIdleEnv is the grains' idle timeout (default the member's).
	childIdleEnv = "PLUGVISOR_MEMBER_GRAIN_IDLE"
	// childAdvertiseEnv is the address the other members dial (default
	// the member's own), and childTimeoutEnv its etcd request timeout.
	childAdvertiseEnv = "PLUGVISOR_MEMBER_ADVERTISE"
	childTimeoutEnv   = "PLUGVISOR_MEMBER_REQUEST_TIMEOUT"
	// childTTL is the members' lease: 5 s, so that a loaded machine's slow
	// keep-alives do not lose it while a member starts.
	childTTL = 5 * time.Second
	// timeout is generous: the machine is shared and protoactor's start-up
	// alone takes a second per member.
	timeout = 60 * time.Second
)

// runChild is a child's main: start a member, answer commands until
// "stop" or the end of stdin, then stop the member and report whether a
// goroutine was left behind.
func runChild() int {
	log := hclog.New(&hclog.LoggerOptions{Output: os.Stderr, Level: hclog.Info, Name: os.Getenv(childEnv)})
	remoteTLS, err := childTLS(os.Getenv(childTLSEnv))
	var idle, requestTimeout time.Duration
	if err == nil && os.Getenv(childIdleEnv) != "" {
		idle, err = time.ParseDuration(os.Getenv(childIdleEnv))
	}
	if err == nil && os.Getenv(childTimeoutEnv) != "" {
		requestTimeout, err = time.ParseDuration(os.Getenv(childTimeoutEnv))
	}
	if err != nil {
		fmt.Printf("error %v\n", err)
		return 1
	}
	m, err := member.Start(member.Config{
		Fleet: fleet.Config{
			Endpoints:      strings.Split(os.Getenv(childEtcdEnv), ","),
			NodeID:         os.Getenv(childEnv),
			LeaseTTL:       childTTL,
			RequestTimeout: requestTimeout,
			Logger:         log,
		},
		Address:          cmp.Or(os.Getenv(childAddressEnv), "127.0.0.1:0"),
		Advertise:        os.Getenv(childAdvertiseEnv),
		TLS:              remoteTLS,
		GrainIdleTimeout: idle,
	})
	if err != nil {
		fmt.Printf("error %v\n", err)
		return 1
	}
	// The node runs a healthy node plugin "ebs", so that its volumes
	// can be claimed.
	err = m.Router().PutFingerprints(context.Background(), []*messages.CSIFingerprint{{
		Type: "csi-node", Name: "ebs", AllocId: "plugin-" + os.Getenv(childEnv), Healthy: true,
		HealthDescription: "healthy", NodeInfo: &messages.CSINodeInfo{NodeId: "csi-" + os.Getenv(childEnv)},
	}})
	if err != nil {
		fmt.Printf("error %v\n", err)
		_ = m.Stop()
		return 1
	}
	fmt.Printf("ready %s %s\n", m.ID(), m.Address())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		args := strings.Fields(in.Text())
		if len(args) == 0 {
			continue
		}
		if args[0] == "stop" {
			break
		}
		fmt.Println(childCommand(m, args))
	}
	if err := m.Stop(); err != nil {
		fmt.Printf("error %v\n", err)
		return 1
	}
	// protoactor's throttles keep a goroutine for one window (up to a
	// minute) after they count an event, then it ends by itself.
	if err := leaked(); err != nil {
		fmt.Printf("leaked %s\n", strings.ReplaceAll(err.Error(), "\n", " | "))
		return 1
	}
	fmt.Println("stopped")
	return 0
}

// leaked is goleak's verdict on the child after its member stopped. A
// connection to a dead member closes after protoactor's fixed two seconds
// of wait after its failed dial, so it asks for up to thirty seconds (a
// loaded machine's ten).
// protoactor's throttles keep a goroutine for one window (up to a minute)
// after they count an event, then it ends by itself: those are ignored.
func leaked() error {
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		err = goleak.Find(
			goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/cluster.NewGossipActor.NewThrottleWithLogger.func2.1"),
			goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/cluster.(*Gossiper).StartGossiping.NewThrottle.func3.1"),
		)
		if err == nil {
			return nil
		}
	}
	return err
}

// childCommand runs one command in a child and returns its one-line
// answer. Volumes are in the default namespace; claims are this node's.
func childCommand(m *member.Member, args []string) string {
	r, node := m.Router(), os.Getenv(childEnv)
	ctx := context.Background()
	arg := func(i int) string {
		if i < len(args) {
			return args[i]
		}
		return ""
	}
	switch args[0] {
	case "id":
		return m.ID()
	case "members":
		return strings.Join(m.Members(), ",")
	case "grains":
		return fmt.Sprint(m.Grains())
	case "standing":
		return m.Store().Standing(time.Now()).String()
	case "owner":
		return r.Owner("", arg(1))
	case "register":
		v := model.NewCSIVolume(arg(1), 0)
		v.PluginID, v.AccessMode, v.AttachmentMode = "ebs", model.AccessMode(arg(2)), model.AttachmentModeFileSystem
		return answer(r.RegisterVolume(ctx, v))
	case "claim":
		return answer(r.Claim(ctx, "", arg(1), &model.Claim{
			AllocID: arg(2), NodeID: node, Mode: model.ClaimMode(arg(3)), State: model.ClaimStateTaken,
		}))
	case "release":
		return answer(r.Release(ctx, "", arg(1), &model.Claim{AllocID: arg(2), State: model.ClaimStateReadyToFree}))
	case "get":
		return answer(r.GetVolume(ctx, "", arg(1)))
	case "unreachable":
		return cmp.Or(strings.Join(m.Unreachable(), "; "), "none")
	case "claims":
		return claimsAtOnce(r, node, arg(1), arg(2))
	case "hammer":
		return hammers.start(r, node, arg(1), arg(2))
	case "hammered":
		return hammers.stop()
	default:
		return "error unknown command " + args[0]
	}
}

// claimsAtOnce claims volume vol for n allocs (c1…cn) at once, and
// answers "ok" with each alloc's answer kind (ok, refused, unavailable,
// unknown or error), in order.
func claimsAtOnce(r *member.Router, node, vol, n string) string {
	count, err := strconv.Atoi(n)
	if err != nil || count <= 0 {
		return fmt.Sprintf("error claims %q: want a positive count", n)
	}
	kinds := make([]string, count)
	var wg sync.WaitGroup
	for i := range count {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := r.Claim(context.Background(), "", vol, &model.Claim{
				AllocID: fmt.Sprintf("c%d", i+1), NodeID: node, Mode: model.ClaimModeWrite, State: model.ClaimStateTaken})
			kinds[i] = strings.Fields(answer(nil, err))[0]
		}()
	}
	wg.Wait()
	return "ok " + strings.Join(kinds, " ")
}

// answer is the one line of a volume or an error: "ok writers=<alloc>@<node>,...
// readers=...", "refused <error>", "unavailable <error>" or "error <error>".
func answer(v *model.CSIVolume, err error) string {
	switch {
	case errors.Is(err, model.ErrOutcomeUnknown):
		return "unknown " + err.Error()
	case errors.Is(err, csi.ErrClaimRefused):
		return "refused " + err.Error()
	case errors.Is(err, model.ErrFleetUnavailable):
		return "unavailable " + err.Error()
	case err != nil:
		return "error " + err.Error()
	}
	if v == nil {
		return "ok"
	}
	return fmt.Sprintf("ok writers=%s readers=%s", claims(v.WriteClaims), claims(v.ReadClaims))
}

func claims(m map[string]*model.Claim) string {
	out := make([]string, 0, len(m))
	for _, c := range m {
		out = append(out, c.AllocID+"@"+c.NodeID)
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// child is a member running in a child process.
type child struct {
	t       *testing.T
	node    string
	id      string // member ID
	address string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	lines   chan string
	stderr  *probe.LogBuffer
	done    bool
}

// startChild starts a member in a child process and waits until it has
// joined; it stops with the test, and the test fails if it leaves a
// goroutine running.
func startChild(t *testing.T, endpoints []string, node string, env ...string) *child {
	t.Helper()
	c := spawnChild(t, endpoints, node, env...)
	ready := strings.Fields(c.next())
	require.Len(t, ready, 3, "member %s did not start: %v", node, ready)
	require.Equal(t, "ready", ready[0])
	c.id, c.address = ready[1], ready[2]
	return c
}

// spawnChild starts a member in a child process; its first line says
// whether it joined ("ready ID ADDRESS") or why not ("error ...").
func spawnChild(t *testing.T, endpoints []string, node string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	races := t.TempDir()
	cmd.Env = append(os.Environ(), childEnv+"="+node, childEtcdEnv+"="+strings.Join(endpoints, ","), racelog.Env(races))
	cmd.Env = append(cmd.Env, env...)
	c := &child{t: t, node: node, cmd: cmd, lines: make(chan string, 16), stderr: &probe.LogBuffer{}}
	cmd.Stderr = c.stderr
	var err error
	c.stdin, err = cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	go func() {
		defer close(c.lines)
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			c.lines <- s.Text()
		}
	}()
	t.Cleanup(func() {
		defer func() {
			if t.Failed() {
				t.Logf("member %s's log:\n%s", node, c.stderr.String())
			}
		}()
		c.stop()
		checkRaces(t, node, races)
	})
	return c
}

// failed waits for a child that did not join to exit.
func (c *child) failed() {
	c.t.Helper()
	c.done = true
	var exit *exec.ExitError
	require.ErrorAs(c.t, c.cmd.Wait(), &exit, "member %s exits with an error", c.node)
}

// next is the child's next line of output.
func (c *child) next() string {
	c.t.Helper()
	select {
	case line, ok := <-c.lines:
		require.True(c.t, ok, "member %s exited", c.node)
		return line
	case <-time.After(timeout):
		require.FailNow(c.t, "no answer", "member %s did not answer within %v", c.node, timeout)
		return ""
	}
}

// send sends one command; next reads its answer.
func (c *child) send(format string, args ...any) {
	c.t.Helper()
	_, err := fmt.Fprintf(c.stdin, format+"\n", args...)
	require.NoError(c.t, err)
}

// ask sends one command and returns the answer.
func (c *child) ask(format string, args ...any) string {
	c.t.Helper()
	c.send(format, args...)
	return c.next()
}

// members are the member IDs the child sees.
func (c *child) members() []string {
	c.t.Helper()
	answer := c.ask("members")
	if answer == "" {
		return nil
	}
	return strings.Split(answer, ",")
}

// stop stops the member gracefully and requires that it left nothing
// running.
func (c *child) stop() {
	c.t.Helper()
	if c.done {
		return
	}
	c.done = true
	_, err := fmt.Fprintln(c.stdin, "stop")
	require.NoError(c.t, err)
	require.Equal(c.t, "stopped", c.next(), "member %s's goroutines after Stop", c.node)
	require.NoError(c.t, c.cmd.Wait())
}

// kill kills the member's process with SIGKILL.
func (c *child) kill() {
	c.t.Helper()
	c.done = true
	require.NoError(c.t, c.cmd.Process.Kill())
	_ = c.cmd.Wait()
}

// waitMembers waits until each of observers sees exactly the members want.
func waitMembers(t *testing.T, observers []*child, want ...*child) {
	t.Helper()
	ids := make([]string, len(want))
	for i, c := range want {
		ids[i] = c.id
	}
	for _, o := range observers {
		require.Eventually(t, func() bool { return sameSet(o.members(), ids) }, timeout, 50*time.Millisecond,
			"member %s does not see exactly %v", o.node, ids)
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]bool{}
	for _, x := range a {
		seen[x] = true
	}
	for _, x := range b {
		if !seen[x] {
			return false
		}
	}
	return true
}

// checkRaces reads the race detector's reports of a child (when the tests
// run with -race) and fails the test on each race on memory that our code
// touches. protoactor's cluster has races of its own at our version, on
// state it keeps without a lock (disthash's rendezvous table, its gossip
// state, its BlockList), which any caller of cluster.Request meets during
// a topology change: those are logged, one line each, and do not fail.
func checkRaces(t *testing.T, node, dir string) {
	t.Helper()
	ours, theirs, err := racelog.Reports(dir)
	require.NoError(t, err)
	for _, report := range ours {
		t.Errorf("member %s: a data race in our code:\n%s", node, report)
	}
	for _, race := range theirs {
		t.Logf("member %s: a data race inside protoactor: %s", node, race)
	}
}
