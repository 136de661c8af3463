package fleet

import (
	"sync/atomic"
	"time"

	"github.com/plugvisor/plugvisor/messages"
)

// Metrics hears what the fleet does, for the agent's Prometheus metrics
// (Config.Metrics). Its methods are called from many goroutines at once
// and must return at once.
type Metrics interface {
	// EtcdRequest: one call to etcd, named by what ("claim", "list
	// volumes"), took took and ended with err (nil, a refusal, or
	// model.ErrFleetUnavailable).
	EtcdRequest(what string, took time.Duration, err error)
	// Claimed: one claim ended with outcome, one of ClaimOutcomes.
	Claimed(outcome string)
	// GCFreed: the GC freed n claims of down nodes.
	GCFreed(n int)
	// GrainActivated: a volume grain started on this member.
	GrainActivated()
}

// ClaimOutcomes are the outcomes Metrics.Claimed is given: a claim made,
// refused by the volume's rules or its claims, refused because etcd did
// not answer, or failed otherwise (bad input, a corrupt record, a lost
// race).
var ClaimOutcomes = []string{"ok", "refused", "unavailable", "error"}

// claimOutcome is the outcome of a claim that ended with err, by the
// error's wire code: a conflict is a refusal.
func claimOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case messages.ErrorToProto(err).GetCode() == messages.ErrorCode_ERROR_CODE_CONFLICT:
		return "refused"
	case messages.ErrorToProto(err).GetCode() == messages.ErrorCode_ERROR_CODE_UNAVAILABLE:
		return "unavailable"
	}
	return "error"
}

// noMetrics is the Metrics of a Config that sets none.
type noMetrics struct{}

func (noMetrics) EtcdRequest(string, time.Duration, error) {}
func (noMetrics) Claimed(string)                           {}
func (noMetrics) GCFreed(int)                              {}
func (noMetrics) GrainActivated()                          {}

// reachability remembers whether etcd answered this node's latest call.
type reachability struct {
	failure atomic.Pointer[error]
}

// observe hears of one call to etcd: unanswered is the error of a call
// etcd did not answer, nil when it answered (whatever it said).
func (r *reachability) observe(unanswered error) {
	if unanswered == nil {
		r.failure.Store(nil)
		return
	}
	r.failure.Store(&unanswered)
}

// EtcdUnreachable is nil while etcd answers this node, else the error
// (matching model.ErrFleetUnavailable) of the latest call it did not
// answer. An answer to any later call, a keep-alive of the lease
// included, clears it.
func (s *Store) EtcdUnreachable() error {
	if p := s.reach.failure.Load(); p != nil {
		return *p
	}
	return nil
}

// LeaseRenewed is when etcd last granted or renewed this node's lease
// (see Standing).
func (s *Store) LeaseRenewed() time.Time { return *s.lease.renewed.Load() }
