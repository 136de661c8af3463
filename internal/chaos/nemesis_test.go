package chaos_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// The kinds of fault.
const (
	faultKill        = "kill -9 of an agent"
	faultEtcdCut     = "etcd cut for an agent"
	faultMemberCut   = "member cut"
	faultEtcdRestart = "etcd kill and restart"
	faultRestore     = "etcd restore from an older snapshot"
	faultDrain       = "drain"
	faultDrainForce  = "drain -force"
	faultDuplicateID = "second agent with a live node ID"
	faultRevoke      = "member lease revoked"
	faultPluginKill  = "kill -9 of a node's CSI plugin"
)

// faultKinds are the kinds a random schedule draws from, with their
// weights.
var faultKinds = []struct {
	kind   string
	weight int
}{
	{faultKill, 3}, {faultEtcdCut, 3}, {faultMemberCut, 3}, {faultEtcdRestart, 1}, {faultRestore, 1},
	{faultDrain, 1}, {faultDrainForce, 2}, {faultDuplicateID, 1}, {faultRevoke, 2}, {faultPluginKill, 2},
}

// fault is one step of a schedule: at At after the schedule starts, Kind
// on node Node (an index; -1: etcd), healed after For.
type fault struct {
	At   time.Duration
	Kind string
	Node int
	For  time.Duration
}

func (f fault) String() string {
	target := "etcd"
	if f.Node >= 0 {
		target = fmt.Sprintf("n%d", f.Node+1)
	}
	return fmt.Sprintf("%6.1fs %-36s %-4s for %4.1fs", f.At.Seconds(), f.Kind, target, f.For.Seconds())
}

// schedule is a seed's faults, in time order.
type schedule struct {
	seed   uint64
	faults []fault
}

func (s schedule) String() string {
	lines := []string{fmt.Sprintf("schedule of seed %d (replay: CHAOS_SEED=%d):", s.seed, s.seed)}
	for _, f := range s.faults {
		lines = append(lines, "  "+f.String())
	}
	return strings.Join(lines, "\n")
}

// randomSchedule draws faults over length from seed, for nodes nodes: one
// every 1 to 4 seconds, each on a random node (etcd for etcd's), lasting
// from one to twelve seconds (a kill or cut of more than the GC's grace
// has its node's claims freed).
func randomSchedule(seed uint64, nodes int, length time.Duration) schedule {
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	total := 0
	for _, k := range faultKinds {
		total += k.weight
	}
	s := schedule{seed: seed}
	for at := time.Duration(500+rng.IntN(1500)) * time.Millisecond; at < length; at += time.Duration(1000+rng.IntN(3000)) * time.Millisecond {
		pick, kind := rng.IntN(total), ""
		for _, k := range faultKinds {
			if pick -= k.weight; pick < 0 {
				kind = k.kind
				break
			}
		}
		node := rng.IntN(nodes)
		if kind == faultEtcdRestart || kind == faultRestore {
			node = -1
		}
		s.faults = append(s.faults, fault{At: at, Kind: kind, Node: node, For: time.Duration(1000+rng.IntN(11000)) * time.Millisecond})
	}
	return s
}

// event is what the nemesis did, when: the checks exempt what a fault
// may take away (the claims of a drained or dead node, what a restore
// forgets).
type event struct {
	at   time.Time
	kind string
	node string
	// snapshot is when the restored snapshot was taken.
	snapshot time.Time
}

// nemesis runs schedules on a fleet.
type nemesis struct {
	f      *chaosFleet
	mu     sync.Mutex
	busy   map[int]bool
	events []event
	counts map[string]int
	skips  int
	errs   []string
	snaps  []snapshotFile
	// links counts the links olderSnapshot made, to name each its own.
	links int
}

type snapshotFile struct {
	path string
	at   time.Time
}

func newNemesis(f *chaosFleet) *nemesis {
	return &nemesis{f: f, busy: map[int]bool{}, counts: map[string]int{}}
}

// run runs s until its last fault has healed (or ctx ends, which heals at
// once what is under way).
func (nm *nemesis) run(ctx context.Context, s schedule) {
	start := time.Now()
	var wg sync.WaitGroup
	for _, ft := range s.faults {
		if !sleepCtx(ctx, time.Until(start.Add(ft.At))) {
			break
		}
		if !nm.take(ft.Node) {
			nm.mu.Lock()
			nm.skips++
			nm.mu.Unlock()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer nm.release(ft.Node)
			nm.inject(ctx, ft)
		}()
	}
	wg.Wait()
}

func (nm *nemesis) take(target int) bool {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	if nm.busy[target] {
		return false
	}
	nm.busy[target] = true
	return true
}

func (nm *nemesis) release(target int) {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	delete(nm.busy, target)
}

// note records an event and counts its fault.
func (nm *nemesis) note(ev event) {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	nm.events = append(nm.events, ev)
	if slices.ContainsFunc(faultKinds, func(k struct {
		kind   string
		weight int
	}) bool {
		return k.kind == ev.kind
	}) {
		nm.counts[ev.kind]++
	}
}

// failed records something the nemesis saw that must not happen.
func (nm *nemesis) failed(format string, args ...any) {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	nm.errs = append(nm.errs, fmt.Sprintf(format, args...))
}

// inject applies one fault, holds it for its time (or until ctx ends),
// and heals it.
func (nm *nemesis) inject(ctx context.Context, ft fault) {
	f := nm.f
	var n *chaosNode
	if ft.Node >= 0 {
		n = f.nodes[ft.Node]
	}
	ev := event{at: time.Now(), kind: ft.Kind}
	if n != nil {
		ev.node = n.id
	}
	switch ft.Kind {
	case faultKill:
		n.serving.Store(nil)
		n.currentAgent().kill9()
		nm.note(ev)
		sleepCtx(ctx, ft.For)
		f.restartAgent(n)
	case faultEtcdCut:
		n.etcdProxy.Cut()
		nm.note(ev)
		sleepCtx(ctx, ft.For)
		n.etcdProxy.Heal()
	case faultMemberCut:
		n.member.Cut()
		nm.note(ev)
		sleepCtx(ctx, ft.For)
		n.member.Heal()
	case faultEtcdRestart:
		f.etcd.proc.kill9()
		nm.note(ev)
		sleepCtx(ctx, min(ft.For, 4*time.Second))
		f.startEtcdOrFail(nm)
	case faultRestore:
		snap := nm.olderSnapshot()
		if snap == nil {
			return
		}
		ev.snapshot = snap.at
		f.restoreEtcd(nm, snap.path, ev)
		_ = os.Remove(snap.path)
	case faultDrain, faultDrainForce:
		nm.drain(ctx, ft, n, ev)
	case faultDuplicateID:
		lease, live := nm.live(n)
		if _, serving := n.servingSince(); !serving || !live {
			return // its node ID is not live: a second agent may take it
		}
		nm.note(ev)
		nm.duplicate(n, lease)
	case faultRevoke:
		if nm.revokeMemberLease(n) {
			nm.note(ev)
		}
	case faultPluginKill:
		n.plugin.kill9()
		nm.note(ev)
		sleepCtx(ctx, ft.For)
		nm.restartPlugin(n)
	}
}

// restartPlugin starts n's CSI plugin again, on its socket, after a kill:
// the plugin removes the socket its killed run left.
func (nm *nemesis) restartPlugin(n *chaosNode) {
	p, err := startPluginProc(nm.f, n)
	if err != nil {
		nm.failed("restart the plugin of %s: %v", n.id, err)
		return
	}
	n.plugin = p
}

// drain drains n from another node (with -force past a 2 s deadline),
// holds, and makes it eligible again.
func (nm *nemesis) drain(ctx context.Context, ft fault, n *chaosNode, ev event) {
	other := nm.f.nodes[(ft.Node+1)%len(nm.f.nodes)]
	args := []string{"node", "drain", "-data-dir", other.dir, "-deadline", "2s", n.id}
	if ft.Kind == faultDrainForce {
		args = append(args, "-force")
	}
	nm.note(ev)
	out, err := cli(args...)
	if ft.Kind == faultDrainForce && mayHaveFreed(out, err) {
		nm.note(event{at: time.Now(), kind: "claims freed by drain -force", node: n.id})
	}
	sleepCtx(ctx, ft.For)
	for range 20 {
		if out, err = cli("node", "eligibility", "-data-dir", other.dir, "-enable", n.id); err == nil {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	nm.failed("node eligibility -enable %s never succeeded: %v: %s", n.id, err, out)
}

// mayHaveFreed says whether a drain -force that answered out and err may
// have freed claims: unless it failed "unavailable", which the fleet
// answers only for what it did not do (a write whose answer from etcd was
// lost is outcome unknown, and a free that failed part way names the
// claims it freed before). An error of another kind (the agent killed
// under the request, the CLI's own timeout) may have come after claims
// were freed.
func mayHaveFreed(out string, err error) bool {
	return err == nil || !strings.Contains(out, "unavailable") ||
		strings.Contains(out, "may or may not have been applied") || strings.Contains(out, "before it failed")
}

// duplicate starts an agent with n's node ID, held under lease, on a data
// dir of its own: it must refuse to start, naming the agent that holds the
// ID; one that runs is stopped, and is a failure unless lease expired
// meanwhile (n was cut off: its ID was free to take).
func (nm *nemesis) duplicate(n *chaosNode, lease clientv3.LeaseID) {
	f := nm.f
	dir, err := os.MkdirTemp(f.dir, "dup")
	if err != nil {
		nm.failed("duplicate: %v", err)
		return
	}
	args := removeFlag(f.agentArgs(n, n.id, dir), "-cluster-advertise")
	args[slices.Index(args, "-cluster-address")+1] = "127.0.0.1:0"
	p, err := start("duplicate-"+n.id, f.races, args...)
	if err != nil {
		nm.failed("duplicate: %v", err)
		return
	}
	select {
	case <-p.done:
		if !strings.Contains(p.out.String(), "node ID held by another agent") {
			nm.failed("the second agent with node ID %s ended without naming the agent that holds it: %s", n.id, tail(p.out.String(), 10))
		}
	case <-time.After(30 * time.Second):
		_ = p.stop(10 * time.Second)
		if nm.leaseLives(lease) {
			nm.failed("a second agent with the live node ID %s was accepted: %s", n.id, tail(p.out.String(), 20))
		}
	}
}

// live reports whether n's liveness key is in etcd, its node ID held,
// and under which lease.
func (nm *nemesis) live(n *chaosNode) (clientv3.LeaseID, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := nm.f.admin.Get(ctx, "/plugvisor/nodes/"+n.id)
	if err != nil || len(resp.Kvs) == 0 {
		return 0, false
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease), true
}

// leaseLives reports whether lease still lives in etcd.
func (nm *nemesis) leaseLives(lease clientv3.LeaseID) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ttl, err := nm.f.admin.TimeToLive(ctx, lease)
	return err == nil && ttl.TTL > 0
}

// removeFlag removes flag and its value from args.
func removeFlag(args []string, flag string) []string {
	for i, a := range args {
		if a == flag {
			return append(slices.Clone(args[:i]), args[i+2:]...)
		}
	}
	return args
}

// revokeMemberLease revokes the lease of n's member key, as etcd expires
// it when n's renewals come late: n's member joins again as a new
// incarnation. It reports whether it found the key.
func (nm *nemesis) revokeMemberLease(n *chaosNode) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := nm.f.admin.Get(ctx, "/plugvisor/members/plugvisor/", clientv3.WithPrefix())
	if err != nil {
		return false
	}
	for _, kv := range resp.Kvs {
		var m cluster.Member
		if proto.Unmarshal(kv.Value, &m) == nil && m.Address() == n.member.Address() {
			_, err := nm.f.admin.Revoke(ctx, clientv3.LeaseID(kv.Lease))
			return err == nil
		}
	}
	return false
}

// snapshots saves a snapshot of etcd every interval until ctx ends,
// keeping the last few, for the restores.
func (nm *nemesis) snapshots(ctx context.Context, interval time.Duration) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; sleepCtx(ctx, interval); i++ {
			path := filepath.Join(nm.f.dir, fmt.Sprintf("snapshot-%d.db", i))
			at := time.Now()
			if _, err := cli("etcd", "snapshot", "save", "-endpoints", nm.f.etcd.client, path); err != nil {
				continue
			}
			nm.mu.Lock()
			nm.snaps = append(nm.snaps, snapshotFile{path: path, at: at})
			if len(nm.snaps) > 5 {
				_ = os.Remove(nm.snaps[0].path)
				nm.snaps = nm.snaps[1:]
			}
			nm.mu.Unlock()
		}
	}()
	return &wg
}

// olderSnapshot is the oldest snapshot kept, or nil: a hard link to it,
// made under the lock the rotation of snapshots takes, so that the
// rotation can remove the original while a restore reads the link (it
// did once, and the restore found no file). The caller removes the link.
func (nm *nemesis) olderSnapshot() *snapshotFile {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	if len(nm.snaps) == 0 {
		return nil
	}
	s := nm.snaps[0]
	nm.links++
	link := fmt.Sprintf("%s.restoring-%d", s.path, nm.links)
	if err := os.Link(s.path, link); err != nil {
		nm.errs = append(nm.errs, fmt.Sprintf("keep %s for a restore: %v", s.path, err)) // nm.mu is held
		return nil
	}
	s.path = link
	return &s
}

// restartAgent starts n's agent again on its data dir, until its API
// answers: an agent whose start cannot reach etcd (cut off, or etcd down
// meanwhile) exits with the reason, as it must, which is no crash; it is
// started again a second later, as systemd would.
func (f *chaosFleet) restartAgent(n *chaosNode) {
	for deadline := time.Now().Add(settle); time.Now().Before(deadline); time.Sleep(time.Second) {
		p, err := start("agent-"+n.id, f.races, f.agentArgs(n, n.id, n.dir)...)
		if err != nil {
			f.t.Errorf("restart agent %s: %v", n.id, err)
			return
		}
		n.mu.Lock()
		n.agent, n.agentRuns, n.restarts = f.procs.add(p), n.agentRuns+1, n.restarts+1
		n.mu.Unlock()
		for p.alive() {
			var h map[string]any
			if n.call(context.Background(), "GET", "/v1/health", nil, &h) == nil {
				n.served()
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		if !strings.Contains(p.out.String(), "cluster mode:") {
			return // not a start that could not join: the checker reports it
		}
		p.ended.Store(true)
	}
	f.t.Errorf("agent %s did not start again within %v", n.id, settle)
}

// startEtcdOrFail starts etcd again on its data dir and ports.
func (f *chaosFleet) startEtcdOrFail(nm *nemesis) {
	for range 20 {
		p, err := start("etcd", f.races, "etcd", "-insecure", "-data-dir", f.etcd.dir, "-listen", f.etcd.client, "-peer", f.etcd.peer)
		if err == nil {
			f.etcd.proc = f.procs.add(p)
			deadline := time.Now().Add(settle)
			for time.Now().Before(deadline) && p.alive() && !strings.Contains(p.out.String(), "etcd ready") {
				time.Sleep(20 * time.Millisecond)
			}
			if p.alive() {
				return
			}
			p.ended.Store(true) // its port may not be free yet: try again
		}
		time.Sleep(500 * time.Millisecond)
	}
	nm.failed("etcd did not start again: %s", tail(f.etcd.proc.out.String(), 10))
}

// restoreEtcd restores etcd from snapshot into a new data dir, then
// kills etcd and starts it there, on the same ports, under the running
// agents: etcd is away for the second it takes to start, less than the
// time the agents' leases take to be at risk. It notes ev, the restore,
// as of the kill.
func (f *chaosFleet) restoreEtcd(nm *nemesis, snapshot string, ev event) {
	f.etcd.restores++
	dir := filepath.Join(f.dir, fmt.Sprintf("etcd-restored-%d", f.etcd.restores))
	out, err := cli("etcd", "snapshot", "restore", snapshot, "-data-dir", dir, "-peer", f.etcd.peer)
	f.etcd.proc.kill9()
	// The restore takes effect here, not when it began: etcd served
	// writes while the snapshot was restored beside it, and a claim
	// acknowledged then is one the restore forgets.
	ev.at = time.Now()
	nm.note(ev)
	if err != nil {
		nm.failed("restore %s: %v: %s", snapshot, err, out)
	} else {
		f.etcd.dir = dir
	}
	f.startEtcdOrFail(nm)
}
