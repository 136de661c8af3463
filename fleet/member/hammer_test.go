package member_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet/member"
)

// hammer is a child's load: goroutines that claim and release a volume
// through the member's Router, each with an alloc of its own, until
// stopped. It counts the requests answered either way: a refusal or an
// unavailable fleet is an answer, a crash is not.
type hammer struct {
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	answered atomic.Int64
	failed   atomic.Int64
}

// hammers is the child's one hammer ("hammer", "hammered").
var hammers hammer

// start starts n goroutines on volume vol.
func (h *hammer) start(r *member.Router, node, vol, n string) string {
	count, err := strconv.Atoi(n)
	if err != nil || count <= 0 {
		return fmt.Sprintf("error hammer %q: want a positive count", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	for i := range count {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			alloc := fmt.Sprintf("h%d", i)
			for ctx.Err() == nil {
				_, err := r.Claim(ctx, "", vol, &model.Claim{AllocID: alloc, NodeID: node, Mode: model.ClaimModeWrite, State: model.ClaimStateTaken})
				h.count(err)
				_, err = r.Release(ctx, "", vol, &model.Claim{AllocID: alloc, State: model.ClaimStateReadyToFree})
				h.count(err)
			}
		}()
	}
	return "ok"
}

func (h *hammer) count(err error) {
	if err == nil {
		h.answered.Add(1)
	} else {
		h.failed.Add(1)
	}
}

// stop stops the goroutines and answers "ok <succeeded> <failed>".
func (h *hammer) stop() string {
	if h.cancel == nil {
		return "error no hammer runs"
	}
	h.cancel()
	h.wg.Wait()
	return fmt.Sprintf("ok %d %d", h.answered.Load(), h.failed.Load())
}
