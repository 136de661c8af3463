package chaos_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// needRoot skips a test that mounts for real, without root.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the fleet's plugins bind-mount: run as root")
	}
}

// TestTheFleetHoldsUnderFixedSchedules runs, on one fleet, the faults
// that broke it when they composed, each as a fixed schedule, with the
// invariants checked throughout:
//
//   - drain -force of a node with a writable mount, then another node
//     mounts the volume: before, both targets stayed writable for as long
//     as the drained node ran;
//   - a second agent started with a live node ID: before, it took the
//     node's liveness key, and when it died the GC freed the real node's
//     claims while the real node kept writing;
//   - etcd restored from a snapshot older than a writer's claim, under
//     running agents, then another node mounts the volume: before, the
//     writer's node never checked its mount again (two writers);
//   - claims through a node cut from the other members' traffic: before,
//     claims answered "refused" were committed;
//   - a member's lease revoked again and again under 32 concurrent claim
//     callers: before, the agent crashed (SIGSEGV) when its member
//     rejoined with claims in flight;
//   - drain -force of a node with a writable mount while its CSI plugin
//     is dead, then another node mounts the volume: the agent cannot
//     unmount, so the target must be read-only until the plugin is back;
//   - etcd restored from a snapshot older than the claim of a mount that
//     waits for its node's hung plugin: before, the mount was answered ok
//     once the plugin answered, and taken down 7 ms later.
func TestTheFleetHoldsUnderFixedSchedules(t *testing.T) {
	needRoot(t)
	f := newChaosFleet(t, 3, 2)
	cases := []struct {
		name string
		body func(ctx context.Context, nm *nemesis, h *history)
	}{
		{"drain -force takes the drained node's writable mount down", f.drainForceCase},
		{"a second agent with a live node ID is refused", f.duplicateCase},
		{"a restore under running agents takes down what it forgot", f.restoreCase},
		{"claims through a member cut off are never answered refused and committed", f.memberCutCase},
		{"a member rejoining under claims keeps running", f.rejoinCase},
		{"drain -force of a node whose plugin is dead makes its writer read-only", f.deadPluginDrainCase},
		{"a mount whose claim a restore forgot while it waited is not answered ok", f.restoreUnderMountCase},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			parent := f.t
			f.t = t // the harness's failures are the case's
			defer func() { f.t = parent }()
			res := f.run(uint64(i), 0, fmt.Sprintf("f%d-", i), tc.body)
			require.Empty(t, res.violations, "fixed schedule %q: %s", tc.name, strings.Join(res.violations, "\n"))
			t.Logf("converged in %v; %d checks", res.converged.Round(time.Millisecond), res.checks)
		})
	}
}

// mountOn mounts vol for alloc through n, recorded in h, and returns the
// answer kind.
func (f *chaosFleet) mountOn(h *history, n *chaosNode, vol, alloc string) string {
	h.begin(alloc, n.id, vol)
	var res struct {
		TargetPath string `json:"target_path"`
	}
	err := n.call(context.Background(), "POST", "/v1/volumes/default/"+vol+"/mount", map[string]any{"alloc_id": alloc}, &res)
	h.mounted(alloc, classify(err), res.TargetPath)
	if err != nil {
		f.t.Logf("mount %s of %s through %s: %v", alloc, vol, n.id, err)
	}
	return classify(err)
}

// unmountOn unmounts alloc's mount through n, recorded in h.
func (f *chaosFleet) unmountOn(h *history, n *chaosNode, vol, alloc string) {
	h.unmounted(alloc, f.unmount(n, vol, alloc, 20))
}

// waitUnpublished waits until alloc has no publish, and says so.
func (f *chaosFleet) waitUnpublished(alloc string) {
	f.t.Helper()
	require.Eventually(f.t, func() bool {
		pubs, err := f.publishes()
		return err == nil && !slices.ContainsFunc(pubs, func(p publish) bool { return p.alloc == alloc })
	}, settle, 50*time.Millisecond, "alloc %s's mount taken down", alloc)
}

func (f *chaosFleet) drainForceCase(ctx context.Context, nm *nemesis, h *history) {
	vol, n1, n3 := f.volumes[0], f.nodes[0], f.nodes[2]
	require.Equal(f.t, answerOK, f.mountOn(h, n3, vol, "drained"))
	nm.drain(ctx, fault{Kind: faultDrainForce, Node: 2, For: time.Second}, n3, event{at: time.Now(), kind: faultDrainForce, node: n3.id})
	require.Eventually(f.t, func() bool { return f.mountOn(h, n1, vol, fmt.Sprintf("steal-%d", time.Now().UnixNano())) == answerOK },
		settle, 500*time.Millisecond, "n1 mounts the volume once n3's claim is freed")
	f.waitUnpublished("drained")
	f.unmountOn(h, n3, vol, "drained")
}

func (f *chaosFleet) deadPluginDrainCase(ctx context.Context, nm *nemesis, h *history) {
	vol, n1, n3 := f.volumes[1], f.nodes[0], f.nodes[2]
	require.Equal(f.t, answerOK, f.mountOn(h, n3, vol, "orphaned"))
	n3.plugin.kill9()
	nm.note(event{at: time.Now(), kind: faultPluginKill, node: n3.id})
	nm.drain(ctx, fault{Kind: faultDrainForce, Node: 2, For: time.Second}, n3, event{at: time.Now(), kind: faultDrainForce, node: n3.id})
	require.Eventually(f.t, func() bool { return f.mountOn(h, n1, vol, fmt.Sprintf("next-%d", time.Now().UnixNano())) == answerOK },
		settle, 500*time.Millisecond, "n1 mounts the volume once n3's claim is freed")
	pubs, err := f.publishes()
	require.NoError(f.t, err)
	i := slices.IndexFunc(pubs, func(p publish) bool { return p.alloc == "orphaned" })
	require.GreaterOrEqual(f.t, i, 0, "n3's plugin is dead: its mount cannot be taken down yet")
	require.False(f.t, pubs[i].writable, "the orphaned writer's target is read-only while its plugin is dead")
	nm.restartPlugin(n3)
	f.waitUnpublished("orphaned")
	f.unmountOn(h, n3, vol, "orphaned")
}

func (f *chaosFleet) duplicateCase(ctx context.Context, nm *nemesis, h *history) {
	vol, n2 := f.volumes[0], f.nodes[1]
	require.Equal(f.t, answerOK, f.mountOn(h, n2, vol, "held"))
	nm.note(event{at: time.Now(), kind: faultDuplicateID, node: n2.id})
	lease, live := nm.live(n2)
	require.True(f.t, live, "n2 holds its node ID")
	nm.duplicate(n2, lease)
	// The real n2 holds its node ID, its lease and its claim all along.
	var health struct{ Status string }
	require.NoError(f.t, n2.call(ctx, "GET", "/v1/health", nil, &health))
	require.Equal(f.t, "ok", health.Status)
	require.Equal(f.t, answerRefused, f.mountOn(h, f.nodes[0], vol, "second-writer"))
	f.unmountOn(h, n2, vol, "held")
}

func (f *chaosFleet) restoreCase(ctx context.Context, nm *nemesis, h *history) {
	vol, n2, n3 := f.volumes[1], f.nodes[1], f.nodes[2]
	snap, taken := f.snapshotEtcd("fixed-restore.db")
	require.Equal(f.t, answerOK, f.mountOn(h, n2, vol, "forgotten"))
	f.restoreEtcd(nm, snap, event{kind: faultRestore, snapshot: taken})
	f.mountsAfterRestore(h, n3, vol)
	f.waitUnpublished("forgotten")
	f.unmountOn(h, n2, vol, "forgotten")
}

// snapshotEtcd saves a snapshot of etcd in the fleet's directory as name,
// and returns its path and when it was taken.
func (f *chaosFleet) snapshotEtcd(name string) (string, time.Time) {
	snap := f.dir + "/" + name
	out, err := cli("etcd", "snapshot", "save", "-endpoints", f.etcd.client, snap)
	require.NoError(f.t, err, out)
	return snap, time.Now()
}

// mountsAfterRestore waits until n mounts vol, on which the restored etcd
// holds no claim.
func (f *chaosFleet) mountsAfterRestore(h *history, n *chaosNode, vol string) {
	require.Eventually(f.t, func() bool { return f.mountOn(h, n, vol, fmt.Sprintf("after-%d", time.Now().UnixNano())) == answerOK },
		settle, 500*time.Millisecond, "%s mounts the volume the restored etcd holds no claim on", n.id)
}

// resyncLogged is what an agent logs when it checks every mount against
// the fleet's claims (volumes.Manager.Resync).
const resyncLogged = "checking every mount against the fleet's claims"

func (f *chaosFleet) restoreUnderMountCase(ctx context.Context, nm *nemesis, h *history) {
	vol, n2, n3 := f.volumes[0], f.nodes[1], f.nodes[2]
	snap, taken := f.snapshotEtcd("fixed-restore-under-mount.db")
	// The plugin hangs: the mount takes its claim, then waits for the
	// plugin's first answer.
	n2.plugin.pause()
	defer n2.plugin.resume()
	answered := make(chan string, 1)
	go func() { answered <- f.mountOn(h, n2, vol, "waiting") }()
	require.Eventually(f.t, func() bool {
		claims, ok := f.claims(vol)
		_, held := claims["waiting"]
		return ok && held
	}, settle, 50*time.Millisecond, "the mount takes its claim, then waits for the plugin")
	checks := strings.Count(n2.agent.out.String(), resyncLogged)
	f.restoreEtcd(nm, snap, event{kind: faultRestore, snapshot: taken})
	// As in the random schedule that found it: n2 learns of the restore
	// while its mount still waits. (One that ends before its node can know
	// is answered ok, as any acknowledged write a later restore forgets.)
	require.Eventually(f.t, func() bool { return strings.Count(n2.agent.out.String(), resyncLogged) > checks },
		settle, 50*time.Millisecond, "n2 checks every mount after the restore")
	n2.plugin.resume()
	select {
	case answer := <-answered:
		require.NotEqual(f.t, answerOK, answer, "the restored etcd holds no claim of the mount")
	case <-time.After(settle):
		f.t.Fatal("the mount was not answered")
	}
	f.mountsAfterRestore(h, n3, vol)
	f.waitUnpublished("waiting")
}

func (f *chaosFleet) memberCutCase(ctx context.Context, nm *nemesis, h *history) {
	n2 := f.nodes[1]
	// n2 learns where the grains of the shared volumes run before the cut:
	// some run on the other members.
	for i, vol := range f.shared {
		f.claimOn(h, n2, vol, fmt.Sprintf("warm-%d", i))
	}
	n2.member.Cut()
	nm.note(event{at: time.Now(), kind: faultMemberCut, node: n2.id})
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.claimOn(h, n2, f.shared[i%len(f.shared)], fmt.Sprintf("cut-%d", i))
		}()
	}
	wg.Wait()
	n2.member.Heal()
	answers := map[string]int{}
	for _, r := range h.records() {
		answers[r.mount]++
		if r.mount != answerRefused && r.mount != answerUnavailable {
			f.releaseOn(h, n2, r.volume, r.id)
		}
	}
	f.t.Logf("the claims through n2 while cut were answered %v", answers)
}

func (f *chaosFleet) rejoinCase(ctx context.Context, nm *nemesis, h *history) {
	n2 := f.nodes[1]
	cctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; cctx.Err() == nil; j++ {
				alloc, vol := fmt.Sprintf("rejoin-%d-%d", i, j), f.shared[i%len(f.shared)]
				if f.claimOn(h, n2, vol, alloc) != answerRefused {
					f.releaseOn(h, n2, vol, alloc)
				}
			}
		}()
	}
	for range 3 {
		sleepCtx(ctx, 3*time.Second)
		if nm.revokeMemberLease(n2) {
			nm.note(event{at: time.Now(), kind: faultRevoke, node: n2.id})
		}
	}
	sleepCtx(ctx, 3*time.Second)
	stop()
	wg.Wait()
	require.True(f.t, n2.currentAgent().alive(), "n2's agent crashed: %s", n2.currentAgent().out.String())
}

// claimOn claims the shared volume vol for alloc through n (recorded as
// its mount in h) and returns the answer kind.
func (f *chaosFleet) claimOn(h *history, n *chaosNode, vol, alloc string) string {
	h.begin(alloc, n.id, vol)
	answer := classify(n.call(context.Background(), "POST", "/v1/volumes/default/"+vol+"/claim", map[string]any{"alloc_id": alloc}, nil))
	h.mounted(alloc, answer, "")
	return answer
}

// releaseOn releases alloc's claim of the shared volume vol through n
// (recorded as its unmount in h), trying again while it cannot.
func (f *chaosFleet) releaseOn(h *history, n *chaosNode, vol, alloc string) {
	answer := ""
	for i := range 20 {
		answer = classify(n.call(context.Background(), "POST", "/v1/volumes/default/"+vol+"/release", map[string]any{"alloc_id": alloc}, nil))
		if answer == answerOK {
			break
		}
		time.Sleep(time.Duration(100*(i+1)) * time.Millisecond)
	}
	h.unmounted(alloc, answer)
}

// TestTheFleetHoldsUnderRandomSchedules runs random schedules of composed
// faults (randomSchedule) on one fleet while clients mount, write and
// unmount, for CHAOS_DURATION (default 60 s), each schedule followed by
// its convergence and checks; CHAOS_SEED replays one seed. It prints a
// table: schedules, faults by kind, operations, checks, violations (0),
// convergence p50 and p99.
func TestTheFleetHoldsUnderRandomSchedules(t *testing.T) {
	needRoot(t)
	duration := time.Minute
	if d, err := time.ParseDuration(os.Getenv("CHAOS_DURATION")); err == nil {
		duration = d
	}
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("CHAOS_SEED"), 10, 64); err == nil {
		seed = s
	}
	f := newChaosFleet(t, 3, 3)
	var results []result
	length := min(duration, 40*time.Second)
	for start := time.Now(); time.Since(start) < duration; seed++ {
		s := randomSchedule(seed, len(f.nodes), length)
		res := f.run(seed, 6, fmt.Sprintf("s%d-", seed), func(ctx context.Context, nm *nemesis, _ *history) { nm.run(ctx, s) })
		results = append(results, res)
		if len(res.violations) > 0 {
			t.Fatalf("%s\nviolations:\n%s", s, strings.Join(res.violations, "\n"))
		}
		t.Logf("seed %d: %d faults, %d operations, %d checks, converged in %v", seed, len(s.faults), res.operations, res.checks, res.converged.Round(time.Millisecond))
	}
	t.Log("\n" + table(results))
}

// table is the summary of a run of schedules.
func table(results []result) string {
	faults := map[string]int{}
	ops, checks, violations := 0, 0, 0
	var converged []time.Duration
	seeds := []string{}
	for _, r := range results {
		for k, v := range r.faults {
			faults[k] += v
		}
		ops, checks, violations = ops+r.operations, checks+r.checks, violations+len(r.violations)
		converged = append(converged, r.converged)
		seeds = append(seeds, strconv.FormatUint(r.seed, 10))
	}
	slices.Sort(converged)
	pct := func(p float64) time.Duration {
		if len(converged) == 0 {
			return 0
		}
		return converged[min(len(converged)-1, int(p*float64(len(converged))))].Round(time.Millisecond)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| schedules | %d (seeds %s) |\n|---|---|\n", len(results), strings.Join(seeds, ", "))
	for _, k := range slices.Sorted(maps.Keys(faults)) {
		fmt.Fprintf(&b, "| faults: %s | %d |\n", k, faults[k])
	}
	fmt.Fprintf(&b, "| operations | %d |\n| invariant checks | %d |\n| violations | %d |\n", ops, checks, violations)
	fmt.Fprintf(&b, "| convergence p50 / p99 | %v / %v |\n", pct(0.5), pct(0.99))
	return b.String()
}
