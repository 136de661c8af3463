//go:build reliability

package reliability_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/storage"
)

func TestKillDuringRegistrationBursts(t *testing.T) {
	const rounds, clients, perClient = 3, 16, 300
	dir := shortDir(t)
	var mu sync.Mutex
	acked := map[string]bool{}
	for round := range rounds {
		a := startAgent(t, dir)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for c := range clients {
			wg.Go(func() {
				for i := range perClient {
					select {
					case <-stop:
						return
					default:
					}
					name := fmt.Sprintf("r%d-c%d-%d", round, c, i)
					status, _, err := a.do("POST", "/v1/plugins", registerBody(name, "a1", nil))
					if err != nil {
						return // the agent is gone
					}
					if status == http.StatusOK {
						mu.Lock()
						acked[name] = true
						mu.Unlock()
					}
				}
			})
		}
		time.Sleep(time.Duration(400+300*round) * time.Millisecond)
		a.kill()
		close(stop)
		wg.Wait()
	}
	got := startAgent(t, dir).names(t)
	lost := 0
	for name := range acked {
		if !got[name] {
			lost++
		}
	}
	report("kill -9 during registration bursts", verdict(lost == 0 && len(acked) > 0),
		"%d rounds of %d clients, SIGKILL mid-burst: %d registrations acknowledged, %d lost after restart",
		rounds, clients, len(acked), lost)
	require.NotEmpty(t, acked)
	require.Zero(t, lost, "acknowledged registrations lost")
}

func TestFullDisk(t *testing.T) {
	dir := shortDir(t)
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", dir).CombinedOutput()
	require.NoError(t, err, "mount a tmpfs (needs root): %s", out)
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	a := startAgent(t, dir)
	for i := range 10 {
		status, body, err := a.do("POST", "/v1/plugins", registerBody(fmt.Sprintf("seed-%d", i), "a1", nil))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status, body)
	}

	filler, err := os.Create(filepath.Join(dir, "filler"))
	require.NoError(t, err)
	chunk := make([]byte, 64<<10)
	for range 128 { // bounded: 8 MiB, twice the file system
		if _, err := filler.Write(chunk); err != nil {
			break
		}
	}
	require.NoError(t, filler.Close())

	bigOptions := map[string]string{} // 16000 bytes: under the default limit of 16 KiB
	for k := range 4 {
		bigOptions[fmt.Sprint(k)] = strings.Repeat("x", 3999)
	}
	var refusedStatus, accepted int
	var refusedBody string
	upDuring := true
	for i := range 100 {
		status, body, err := a.do("POST", "/v1/plugins",
			registerBody(fmt.Sprintf("full-%d", i), "a1", bigOptions))
		if err != nil {
			upDuring = false
			break
		}
		if status != http.StatusOK {
			refusedStatus, refusedBody = status, body
			break
		}
		accepted++
	}
	healthDuring := a.healthLatency()
	clear := strings.Contains(refusedBody, "no space left on device")

	require.NoError(t, os.Remove(filepath.Join(dir, "filler")))
	status, body, err := a.do("POST", "/v1/plugins", registerBody("after-space-returns", "a1", nil))
	recovered := err == nil && status == http.StatusOK
	_, stopErr := a.stop()
	got := startAgent(t, dir).names(t)
	kept := got["after-space-returns"] && got["seed-0"]

	report("ENOSPC on a 4 MiB tmpfs", verdict(refusedStatus != 0 && clear && upDuring && healthDuring < time.Second && recovered && kept && stopErr == nil),
		"refused after %d more writes with HTTP %d (%q); health %s while full; after space returned: write %v, clean stop %v, records kept over restart %v",
		accepted, refusedStatus, excerpt(refusedBody, "no space"), healthDuring.Round(100*time.Microsecond), recovered, stopErr == nil, kept)
	require.NotZero(t, refusedStatus, "the disk never filled")
	require.True(t, clear, "the refusal says why: %s", refusedBody)
	require.True(t, recovered, "writes work again when space returns: %d %s %v", status, body, err)
	require.True(t, kept)
}

// excerpt is the part of an API error body around the first occurrence of
// key, on one line.
func excerpt(body, key string) string {
	var e struct{ Error string }
	s := body
	if json.Unmarshal([]byte(body), &e) == nil && e.Error != "" {
		s = e.Error
	}
	i := strings.Index(s, key)
	if i < 0 {
		return s[:min(len(s), 80)]
	}
	return "…" + s[max(0, i-30):min(len(s), i+30)]
}

func TestBitFlipsInTheStateFile(t *testing.T) {
	const trials = 60
	src := shortDir(t)
	a := startAgent(t, src)
	for i := range 30 {
		status, body, err := a.do("POST", "/v1/plugins", registerBody(fmt.Sprintf("flip-%d", i), "a1", map[string]string{"k": "v"}))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status, body)
	}
	_, err := a.stop()
	require.NoError(t, err)
	orig, err := os.ReadFile(filepath.Join(src, "state.db"))
	require.NoError(t, err)

	open := func(data []byte, reset bool) (*agent.Agent, error) {
		d := shortDir(t)
		require.NoError(t, os.WriteFile(filepath.Join(d, "state.db"), data, 0o600))
		return agent.Start(agent.Config{DataDir: d, NodeID: "n1", ResetCorruptState: reset,
			ResyncInterval: time.Hour, FingerprintInterval: time.Hour})
	}
	base, err := open(orig, false)
	require.NoError(t, err)
	want := base.Registry().ListPlugins("")
	require.NoError(t, base.Shutdown(t.Context()))
	require.Len(t, want, 30)

	records := []int{}
	for i := 0; ; {
		j := strings.Index(string(orig[i:]), "/run/pvr-absent/flip-")
		if j < 0 {
			break
		}
		records = append(records, i+j)
		i += j + 1
	}
	rng := rand.New(rand.NewPCG(13, 13))
	var detected, harmless, silent, other, recovered int
	var firstOther string
	for trial := range trials {
		data := append([]byte(nil), orig...)
		at := rng.IntN(len(data))
		if trial%2 == 1 && len(records) > 0 { // half of the flips land inside records
			at = min(len(data)-1, max(0, records[rng.IntN(len(records))]+rng.IntN(128)-64))
		}
		data[at] ^= 1 << rng.IntN(8)

		a, err := open(data, false)
		switch {
		case err == nil:
			same := equalLists(want, a.Registry().ListPlugins(""))
			require.NoError(t, a.Shutdown(t.Context()))
			if same {
				harmless++
			} else {
				silent++
			}
			continue
		case errors.Is(err, storage.ErrCorrupt) && strings.Contains(err.Error(), "-reset-corrupt-state"):
			detected++
		default:
			other++
			if firstOther == "" {
				firstOther = err.Error()
			}
		}
		if a, err := open(data, true); err == nil {
			recovered++
			require.NoError(t, a.Shutdown(t.Context()))
		}
	}
	refused := detected + other
	report("bit flips in state.db", verdict(silent == 0 && other == 0 && recovered == refused),
		"%d single-bit flips (half inside records): %d refused naming -reset-corrupt-state, %d harmless (state unchanged), %d served altered state, %d other errors; %d of %d refused files started with the flag",
		trials, detected, harmless, silent, other, recovered, refused)
	require.Zero(t, silent, "a flipped bit changed the state the agent served")
	require.Zero(t, other, "a corruption error without the remedy: %s", firstOther)
	require.Equal(t, refused, recovered, "-reset-corrupt-state recovers every refused file")
}

func equalLists[M proto.Message](a, b []M) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// The agent's default HTTP limits (agent/limits.go) that the slow-body row
// judges against: each listener serves at most maxConns connections, and
// lets at most probation more wait aside (a small goroutine each) for their
// request; a body must arrive at 1 KiB/s once bodyGrace has passed.
const (
	maxConns  = 256
	probation = 16 * maxConns
	bodyGrace = 5 * time.Second
)

func TestSlowBodyConnections(t *testing.T) {
	const conns, hold = 500, 4 * bodyGrace
	dir := shortDir(t)
	a := startAgent(t, dir)
	g0, r0 := a.metric("go_goroutines"), a.metric("process_resident_memory_bytes")
	var open []net.Conn
	t.Cleanup(func() {
		for _, c := range open {
			_ = c.Close()
		}
	})
	for range conns {
		c, err := net.Dial("unix", filepath.Join(dir, "plugvisor.sock"))
		if err != nil {
			break
		}
		open = append(open, c)
		_, _ = fmt.Fprint(c, "POST /v1/plugins HTTP/1.1\r\nHost: plugvisor\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
	}
	time.Sleep(bodyGrace / 2)
	g1, r1 := a.metric("go_goroutines"), a.metric("process_resident_memory_bytes")
	health := a.healthLatency()
	time.Sleep(hold - bodyGrace/2)
	ended := 0
	buf := make([]byte, 512)
	for _, c := range open {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
		var ne net.Error
		if _, err := c.Read(buf); err == nil || !errors.As(err, &ne) || !ne.Timeout() {
			ended++ // answered or closed by the agent
		}
	}
	// Bounded: at most one goroutine per connection served or waiting
	// aside, with a little room for the runtime's own; and the agent cuts
	// every slow body, by its rate, or by closing it for another.
	bounded := g1-g0 <= maxConns+probation+32
	cut := ended == len(open)
	report("slow-body connections", verdict(bounded && cut && health < time.Second),
		"%d connections each sending 1 of 100000 body bytes: goroutines %.0f → %.0f (cap %d connections, %d more waiting aside), RSS %.0f → %.0f MiB after %s; /v1/health on a new connection %s; %d of %d ended by the agent within %s (body rate 1 KiB/s after %s)",
		len(open), g0, g1, maxConns, probation, r0/(1<<20), r1/(1<<20), bodyGrace/2, health.Round(time.Millisecond), ended, len(open), hold, bodyGrace)
}

// hangListener accepts connections at path and never answers them.
func hangListener(t *testing.T, path string) {
	t.Helper()
	l, err := net.Listen("unix", path)
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
}

func TestAPluginThatHangsAtEveryRPC(t *testing.T) {
	const watch = 10 * time.Second
	dir := shortDir(t)
	a := startAgent(t, dir)
	hangListener(t, filepath.Join(dir, "plugins", "hang.sock")) // Docker activation hangs
	csiSock := filepath.Join(dir, "hang-csi.sock")
	hangListener(t, csiSock) // every CSI RPC hangs
	body := `{"type":"csi-node","name":"hang","alloc_id":"a1","connection":{"socket_path":"` + csiSock + `"}}`
	status, resp, err := a.do("POST", "/v1/plugins", body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, resp)

	start := time.Now()
	stop := make(chan struct{})
	worst := a.healthWatch(100*time.Millisecond, stop)
	ok, tries := 0, 0
	for i := 0; i < 200 && time.Since(start) < watch; i++ {
		tries++
		if status, _, err := a.do("POST", "/v1/plugins", registerBody(fmt.Sprintf("other-%d", i), "a1", nil)); err == nil && status == http.StatusOK {
			ok++
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(max(0, watch-time.Since(start)))
	close(stop)
	w := <-worst
	took, stopErr := a.stop()
	report("a plugin that hangs at every RPC", verdict(w < time.Second && ok == tries && stopErr == nil && took < 30*time.Second),
		"a Docker socket and a CSI socket that accept and never answer, for %s: slowest health %s, %d of %d other registrations accepted; SIGTERM to exit %s (error %v)",
		watch, w.Round(time.Millisecond), ok, tries, took.Round(time.Millisecond), stopErr)
}

func TestSixtyFourClients(t *testing.T) {
	const clients, duration = 64, 10 * time.Second
	dir := shortDir(t)
	a := startAgent(t, dir)
	stop := make(chan struct{})
	worst := a.healthWatch(50*time.Millisecond, stop) // on new connections, not the clients'

	deadline := time.Now().Add(duration)
	var requests, failures atomic.Int64
	var firstFailure atomic.Value
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := 0; i < 1_000_000 && time.Now().Before(deadline); i++ {
				name, alloc := fmt.Sprintf("c%d-%d", c, i%8), fmt.Sprintf("a%d", i%3)
				var status int
				var body string
				var err error
				switch i % 3 {
				case 0:
					status, body, err = a.do("POST", "/v1/plugins", registerBody(name, alloc, nil))
				case 1:
					status, body, err = a.do("GET", "/v1/plugins?type=reliability", "")
				case 2:
					status, body, err = a.do("DELETE", "/v1/plugins/reliability/"+name+"/"+alloc, "")
				}
				requests.Add(1)
				if err != nil || status >= 500 {
					failures.Add(1)
					firstFailure.CompareAndSwap(nil, fmt.Sprintf("%d %s %v", status, body, err))
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	w := <-worst
	report("64 clients for 10 s", verdict(w < time.Second && failures.Load() == 0),
		"%d clients registering, listing and deregistering: %d requests (%.0f/s), %d failed; slowest /v1/health %s",
		clients, requests.Load(), float64(requests.Load())/duration.Seconds(), failures.Load(), w.Round(time.Millisecond))
	require.Less(t, w, time.Second, "health answered slowly")
	require.Zero(t, failures.Load(), "first failure: %v", firstFailure.Load())
}
