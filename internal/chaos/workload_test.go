package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"
)

// The answer kinds of a request, as a client sees them.
const (
	answerOK          = "ok"          // done
	answerRefused     = "refused"     // a 4xx: not done
	answerUnavailable = "unavailable" // a 503 other than outcome unknown: not done
	answerUnknown     = "unknown"     // outcome unknown (503 outcome_unknown, 504, a lost connection): maybe done
	answerDown        = "down"        // the agent did not take the request (its socket refused): not done
	answerAbsent      = "absent"      // an unmount of no mount (404)
	answer500         = "internal"    // a 500: a defect
)

// classify is the kind of an answer of call.
func classify(err error) string {
	var e *apiError
	switch {
	case err == nil:
		return answerOK
	case errors.As(err, &e) && e.status == 503 && e.code == "outcome_unknown", errors.As(err, &e) && e.status == 504:
		return answerUnknown
	case errors.As(err, &e) && e.status == 503:
		return answerUnavailable
	case errors.As(err, &e) && e.status == 404:
		return answerAbsent
	case errors.As(err, &e) && e.status >= 500:
		return answer500
	case errors.As(err, &e):
		return answerRefused
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ENOENT):
		return answerDown
	}
	return answerUnknown
}

// allocRecord is what a client did with one alloc: one mount, then the
// unmount, each with when it started and ended and its answer.
type allocRecord struct {
	id, node, volume        string
	mountStart, mountEnd    time.Time
	mount                   string
	unmountEnd              time.Time
	unmount, target, writes string
}

// history is every alloc's record, and counts of the answers.
type history struct {
	mu      sync.Mutex
	allocs  map[string]*allocRecord
	answers map[string]int
}

func newHistory() *history {
	return &history{allocs: map[string]*allocRecord{}, answers: map[string]int{}}
}

func (h *history) begin(id, node, volume string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.allocs[id] = &allocRecord{id: id, node: node, volume: volume, mountStart: time.Now()}
}

func (h *history) mounted(id, answer, target string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.allocs[id]
	r.mount, r.mountEnd, r.target = answer, time.Now(), target
	h.answers["mount "+answer]++
}

func (h *history) unmounted(id, answer string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.allocs[id]
	r.unmount, r.unmountEnd = answer, time.Now()
	h.answers["unmount "+answer]++
}

func (h *history) wrote(id, outcome string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.allocs[id].writes = outcome
	h.answers["write "+outcome]++
}

// nodeOf is the node an alloc mounted through, "" for an alloc the
// clients never used.
func (h *history) nodeOf(id string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r := h.allocs[id]; r != nil {
		return r.node
	}
	return ""
}

// records is a copy of every alloc's record.
func (h *history) records() []allocRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]allocRecord, 0, len(h.allocs))
	for _, r := range h.allocs {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// operations counts the requests the clients sent.
func (h *history) operations() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for k, v := range h.answers {
		if k[:5] != "write" {
			n += v
		}
	}
	return n
}

// clients run workers until ctx ends: each mounts a volume for a new alloc
// of its own through a node, writes a file into a writable target, holds
// it a moment, and unmounts it, trying again while the fleet cannot
// answer.
func (f *chaosFleet) clients(ctx context.Context, h *history, workers int, prefix string, seed uint64) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for seq := 0; ctx.Err() == nil; seq++ {
				n := f.nodes[rng.IntN(len(f.nodes))]
				vol := f.volumes[rng.IntN(len(f.volumes))]
				f.use(ctx, h, n, vol, fmt.Sprintf("%s%d-%d", prefix, w, seq), time.Duration(100+rng.IntN(500))*time.Millisecond)
			}
		}()
	}
	return &wg
}

// use mounts vol for alloc through n, writes, holds and unmounts.
func (f *chaosFleet) use(ctx context.Context, h *history, n *chaosNode, vol, alloc string, hold time.Duration) {
	h.begin(alloc, n.id, vol)
	var res struct {
		TargetPath string `json:"target_path"`
	}
	answer := classify(n.call(context.Background(), "POST", "/v1/volumes/default/"+vol+"/mount", map[string]any{"alloc_id": alloc}, &res))
	h.mounted(alloc, answer, res.TargetPath)
	switch answer {
	case answerOK:
		h.wrote(alloc, writeOutcome(os.WriteFile(filepath.Join(res.TargetPath, alloc), []byte(alloc), 0o600)))
		sleepCtx(ctx, hold)
	case answerUnknown:
	default:
		return
	}
	h.unmounted(alloc, f.unmount(n, vol, alloc, 20))
}

// unmount unmounts alloc's mount of vol through n, trying again, up to
// tries times, while the answer leaves it in place. A try that finds no
// mount after one answered unavailable or unknown is the unmount done:
// the way out is steps, and a try that failed at the claim's release,
// after the target's unmount, leaves the rest to the next try or to the
// agent's reconcile (seen once: the node's lease lapsed, etcd did not
// answer the release, and the reconcile under the new lease finished the
// way out). A first try that finds no mount, or one after the agent took
// no request, is a mount taken away.
func (f *chaosFleet) unmount(n *chaosNode, vol, alloc string, tries int) string {
	answer := ""
	for i := range tries {
		before := answer
		answer = classify(n.call(context.Background(), "POST", "/v1/volumes/default/"+vol+"/unmount", map[string]any{"alloc_id": alloc}, nil))
		if answer == answerAbsent && (before == answerUnavailable || before == answerUnknown) {
			return answerOK
		}
		if answer == answerOK || answer == answerAbsent {
			return answer
		}
		time.Sleep(time.Duration(200*(i+1)) * time.Millisecond)
	}
	return answer
}

// writeOutcome names a write's outcome: ok, read-only (a fenced target)
// or the error.
func writeOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, syscall.EROFS):
		return "read-only"
	}
	return "failed"
}

// sleepCtx sleeps d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
