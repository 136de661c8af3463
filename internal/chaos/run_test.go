package chaos_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// convergeBound is how long the fleet may take, once every fault healed,
// for each node's publishes to equal its claims.
const convergeBound = 2 * time.Minute

// result is what one schedule did and found.
type result struct {
	seed       uint64
	faults     map[string]int
	operations int
	checks     int
	violations []string
	converged  time.Duration
}

// run is one schedule on the fleet: the clients run (unless workers is
// 0) while body injects faults; then every fault heals, the clients stop,
// the fleet must converge, and the invariants are checked over the whole
// history. body is the schedule's nemesis, or a fixed sequence.
func (f *chaosFleet) run(seed uint64, workers int, prefix string, body func(ctx context.Context, nm *nemesis, h *history)) result {
	h := newHistory()
	c := newChecker(f, h)
	nm := newNemesis(f)
	ctx, cancel := context.WithCancel(context.Background())
	watching := c.watch(ctx, 200*time.Millisecond)
	snapshots := nm.snapshots(ctx, 2*time.Second)
	cctx, stopClients := context.WithCancel(context.Background())
	clients := f.clients(cctx, h, workers, prefix, seed)
	body(ctx, nm, h)
	stopClients()
	clients.Wait()
	healed := f.heal(nm)
	res := result{seed: seed, faults: nm.counts}
	res.converged = f.converge(h, nm, c, healed)
	cancel()
	watching.Wait()
	snapshots.Wait()
	c.sample()
	f.final(h, nm, c)
	f.cleanup(h, c)
	res.operations, res.checks = h.operations(), c.checks
	res.violations = append(slices.Clone(nm.errs), c.violations...)
	return res
}

// heal restarts every agent and plugin that is not running and waits
// until each agent answers; it returns when that is so.
func (f *chaosFleet) heal(nm *nemesis) time.Time {
	if !f.etcd.proc.alive() {
		f.startEtcdOrFail(nm)
	}
	for _, n := range f.nodes {
		n.etcdProxy.Heal()
		n.member.Heal()
		if !n.currentAgent().alive() {
			f.restartAgent(n)
		}
		if !n.plugin.alive() {
			nm.restartPlugin(n)
		}
	}
	for _, n := range f.nodes {
		f.waitAgent(n)
	}
	return time.Now()
}

// nodeClaims are the claims of the fleet by node (node → alloc → volume),
// as the history maps allocs to nodes; ok is false while the fleet cannot
// say.
func (f *chaosFleet) nodeClaims(h *history) (map[string]map[string]string, bool) {
	out := map[string]map[string]string{}
	for _, vol := range append(slices.Clone(f.volumes), f.shared...) {
		cl, ok := f.claims(vol)
		if !ok {
			return nil, false
		}
		for alloc := range cl {
			node := h.nodeOf(alloc)
			if out[node] == nil {
				out[node] = map[string]string{}
			}
			out[node][alloc] = vol
		}
	}
	return out, true
}

// nodePublishes are the publishes by node (node → alloc → volume).
func (f *chaosFleet) nodePublishes() (map[string]map[string]string, error) {
	pubs, err := f.publishes()
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]string{}
	for _, p := range pubs {
		if out[p.node] == nil {
			out[p.node] = map[string]string{}
		}
		out[p.node][p.alloc] = p.volume
	}
	return out, nil
}

// exempt reports whether a fault may have taken alloc's claim away, or
// given it back, after since: a restore of a snapshot taken after the
// alloc's mount began, a drain -force, kill or etcd cut of its node.
func exempt(nm *nemesis, r allocRecord, since time.Time) bool {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	for _, ev := range nm.events {
		switch {
		case ev.kind == faultRestore && !ev.snapshot.Before(r.mountStart.Add(-time.Second)),
			ev.kind == faultRestore && ev.at.After(since):
			return true
		case ev.node == r.node && ev.at.After(since) && (ev.kind == "claims freed by drain -force" || ev.kind == faultKill || ev.kind == faultEtcdCut):
			return true
		}
	}
	return false
}

// converge releases the claims a restore brought back (their allocs had
// unmounted after the snapshot, as an operator would release them), then
// waits until every node's publishes equal its claims, and returns how
// long that took after healed; a fleet that does not converge within
// convergeBound is a violation naming the difference.
func (f *chaosFleet) converge(h *history, nm *nemesis, c *checker, healed time.Time) time.Duration {
	diff := ""
	for deadline := time.Now().Add(convergeBound); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		claims, ok := f.nodeClaims(h)
		pubs, err := f.nodePublishes()
		if !ok || err != nil {
			diff = fmt.Sprintf("the fleet cannot say (%v)", err)
			continue
		}
		f.releaseBroughtBack(h, nm, claims, pubs)
		diff = ""
		for _, n := range f.nodes {
			if !maps.Equal(claims[n.id], pubs[n.id]) {
				diff += fmt.Sprintf("; %s: claims %v, publishes %v", n.id, claims[n.id], pubs[n.id])
			}
		}
		if diff == "" {
			return time.Since(healed)
		}
	}
	c.violate("converge", "the fleet did not converge within %v of the faults healing: %s", convergeBound, strings.TrimPrefix(diff, "; "))
	return convergeBound
}

// releaseBroughtBack releases, through its node, each claim with no
// publish of an alloc that a restore exempts: its alloc unmounted, or
// never mounted, after the snapshot that brought the claim back.
func (f *chaosFleet) releaseBroughtBack(h *history, nm *nemesis, claims, pubs map[string]map[string]string) {
	records := map[string]allocRecord{}
	for _, r := range h.records() {
		records[r.id] = r
	}
	for node, allocs := range claims {
		for alloc, vol := range allocs {
			r, known := records[alloc]
			if _, published := pubs[node][alloc]; published || !known || !exempt(nm, r, r.mountStart) {
				continue
			}
			for _, n := range f.nodes {
				if n.id == node {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					_ = n.call(ctx, "POST", "/v1/volumes/default/"+vol+"/release", map[string]any{"alloc_id": alloc}, nil)
					cancel()
				}
			}
		}
	}
}

// final checks the history against the converged fleet: no mount
// answered refused holds a claim, no acknowledged unmount left one, no
// acknowledged mount was taken down without a fault that frees claims,
// and nothing answered 500.
func (f *chaosFleet) final(h *history, nm *nemesis, c *checker) {
	claims, ok := f.nodeClaims(h)
	if !ok {
		c.violate("final", "the fleet cannot say its claims once converged")
		return
	}
	held := map[string]bool{}
	for _, allocs := range claims {
		for alloc := range allocs {
			held[alloc] = true
		}
	}
	for _, r := range h.records() {
		switch {
		case r.mount == answer500 || r.unmount == answer500:
			c.violate("500 "+r.id, "alloc %s on %s: an answer 500 (mount %s, unmount %s)", r.id, r.node, r.mount, r.unmount)
		case (r.mount == answerRefused || r.mount == answerUnavailable || r.mount == answerDown) && held[r.id] && !exempt(nm, r, r.mountStart):
			c.violate("refused "+r.id, "alloc %s: its mount of %s through %s was answered %s, and its claim is held", r.id, r.volume, r.node, r.mount)
		case r.unmount == answerOK && held[r.id] && !exempt(nm, r, r.mountStart):
			c.violate("released "+r.id, "alloc %s: its unmount of %s through %s was answered ok, and its claim is held", r.id, r.volume, r.node)
		case r.mount == answerOK && r.unmount == answerAbsent && !exempt(nm, r, r.mountEnd):
			c.violate("lost "+r.id, "alloc %s: its mount of %s through %s was answered ok, and was taken down with no fault that frees claims", r.id, r.volume, r.node)
		}
	}
}

// cleanup unmounts every publish left and releases every claim left, so
// that the next schedule starts from an empty fleet.
func (f *chaosFleet) cleanup(h *history, c *checker) {
	for deadline := time.Now().Add(convergeBound); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		claims, ok := f.nodeClaims(h)
		pubs, err := f.nodePublishes()
		if !ok || err != nil {
			continue
		}
		left := 0
		for _, n := range f.nodes {
			for alloc, vol := range pubs[n.id] {
				left++
				f.unmount(n, vol, alloc, 1)
			}
			for alloc, vol := range claims[n.id] {
				left++
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_ = n.call(ctx, "POST", "/v1/volumes/default/"+vol+"/release", map[string]any{"alloc_id": alloc}, nil)
				cancel()
			}
		}
		if left == 0 {
			return
		}
	}
	c.violate("cleanup", "the fleet's mounts and claims could not be cleaned up within %v", convergeBound)
}
