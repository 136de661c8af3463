package chaos_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/plugvisor/plugvisor/internal/mountinfo"
)

// checker samples the kernel's mount table and the fleet's claims while
// a schedule runs, and holds the invariants' violations.
type checker struct {
	f *chaosFleet
	h *history

	mu         sync.Mutex
	checks     int
	violations []string
	reported   map[string]bool
	// unclaimed is when a writable mount was first seen without its write
	// claim on its node; twoWriters when a volume was first seen with
	// writable mounts on two nodes.
	unclaimed, twoWriters map[string]time.Time
}

func newChecker(f *chaosFleet, h *history) *checker {
	return &checker{f: f, h: h, reported: map[string]bool{}, unclaimed: map[string]time.Time{}, twoWriters: map[string]time.Time{}}
}

// violate records a violation once per key.
func (c *checker) violate(key, format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reported[key] {
		return
	}
	c.reported[key] = true
	c.violations = append(c.violations, fmt.Sprintf(format, args...))
}

// watch samples every interval until ctx ends.
func (c *checker) watch(ctx context.Context, interval time.Duration) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for sleepCtx(ctx, interval) {
			c.sample()
		}
	}()
	return &wg
}

// publish is a target the kernel has mounted under a node's per-alloc
// directories.
type publish struct {
	node, alloc, volume, target string
	writable                    bool
}

// publishes are the mounts of every node's per-alloc targets now.
func (f *chaosFleet) publishes() ([]publish, error) {
	file, err := os.Open(mountinfo.DefaultPath)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	mounts, err := mountinfo.Parse(file)
	if err != nil {
		return nil, err
	}
	var out []publish
	for _, n := range f.nodes {
		prefix := n.dir + "/csi/hp/per-alloc/"
		for _, m := range mounts {
			rest, ok := strings.CutPrefix(m.MountPoint, prefix)
			parts := strings.Split(rest, "/")
			if !ok || len(parts) != 3 {
				continue
			}
			out = append(out, publish{node: n.id, alloc: parts[0], volume: parts[2], target: m.MountPoint,
				writable: strings.HasPrefix(m.Options, "rw")})
		}
	}
	return out, nil
}

// claims are the claims of volume (alloc → write or not), as any node
// that answers reads them from the fleet; ok is false when none answers.
func (f *chaosFleet) claims(volume string) (map[string]bool, bool) {
	for _, n := range f.nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		var v struct {
			ReadClaims  []string `json:"read_claims"`
			WriteClaims []string `json:"write_claims"`
		}
		err := n.call(ctx, "GET", "/v1/volumes/default/"+volume, nil, &v)
		cancel()
		if err != nil {
			continue
		}
		out := map[string]bool{}
		for _, a := range v.ReadClaims {
			out[a] = false
		}
		for _, a := range v.WriteClaims {
			out[a] = true
		}
		return out, true
	}
	return nil, false
}

// sample checks once: every writable mount has its write claim on its
// node, no volume has writable mounts on two nodes (each beyond the
// fence's bound), and no process crashed or reported a panic or a race.
func (c *checker) sample() {
	pubs, err := c.f.publishes()
	if err != nil {
		c.violate("mountinfo", "cannot read the mount table: %v", err)
		return
	}
	now := time.Now()
	writers := map[string]map[string]bool{} // volume → nodes with a writable mount
	claims := map[string]map[string]bool{}
	seen := map[string]bool{}
	for _, p := range pubs {
		if !p.writable {
			continue
		}
		if writers[p.volume] == nil {
			writers[p.volume] = map[string]bool{}
		}
		writers[p.volume][p.node] = true
		if _, read := claims[p.volume]; !read {
			if cl, ok := c.f.claims(p.volume); ok {
				claims[p.volume] = cl
			} else {
				claims[p.volume] = nil
			}
		}
		cl := claims[p.volume]
		if cl == nil {
			continue // the fleet cannot say now
		}
		seen[p.target] = true
		c.mu.Lock()
		first, was := c.unclaimed[p.target]
		switch {
		case cl[p.alloc] && c.h.nodeOf(p.alloc) == p.node:
			delete(c.unclaimed, p.target)
		case !was:
			c.unclaimed[p.target] = now
		}
		c.mu.Unlock()
		// The bound runs from the agent's start: one that does not run
		// fences nothing (docs/fleet-operations.md).
		since, serving := c.f.node(p.node).servingSince()
		if !serving {
			continue
		}
		first = later(first, since)
		if was && now.Sub(first) > fenceBound {
			c.violate("unclaimed "+p.target, "%s: %s is mounted writable on %s without its write claim there, for %v (bound %v)",
				now.Format(time.TimeOnly), p.target, p.node, now.Sub(first).Round(time.Millisecond), fenceBound)
		}
	}
	c.mu.Lock()
	for target := range c.unclaimed {
		if !seen[target] {
			delete(c.unclaimed, target)
		}
	}
	for vol, nodes := range writers {
		if len(nodes) < 2 {
			delete(c.twoWriters, vol)
			continue
		}
		first, was := c.twoWriters[vol]
		if !was {
			c.twoWriters[vol] = now
		}
		for node := range nodes {
			since, serving := c.f.node(node).servingSince()
			first, was = later(first, since), was && serving
		}
		if was && now.Sub(first) > fenceBound {
			defer c.violate("two writers "+vol, "%s: volume %s is mounted writable on %v, for %v (bound %v)",
				now.Format(time.TimeOnly), vol, slices.Sorted(maps.Keys(nodes)), now.Sub(first).Round(time.Millisecond), fenceBound)
		}
	}
	for vol := range c.twoWriters {
		if len(writers[vol]) < 2 {
			delete(c.twoWriters, vol)
		}
	}
	c.checks++
	c.mu.Unlock()
	c.checkProcesses()
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// checkProcesses records a process that ended by itself, or whose output
// holds a panic or a data race.
func (c *checker) checkProcesses() {
	c.f.procs.mu.Lock()
	all := slices.Clone(c.f.procs.all)
	c.f.procs.mu.Unlock()
	for _, p := range all {
		if strings.HasPrefix(p.name, "duplicate-") {
			continue // it must end by itself (the nemesis checks how)
		}
		if why := p.crashed(); why != "" {
			c.violate("crash "+fmt.Sprintf("%p", p), "%s", why)
		}
		if why := p.trouble(); why != "" {
			c.violate("trouble "+fmt.Sprintf("%p", p), "%s", why)
		}
	}
}
