package volumes

import (
	"math/rand/v2"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/plugvisor/plugvisor/supervisor"
)

// The GC step: a volume whose record is not settled after an operation (a
// rollback or a detach that failed, a plugin that is not registered yet)
// gets a reconcile again after a backoff decided by supervisor.Decide from
// the volume's failure history and the clock. It never gives up: past the
// policy's limits it retries every MaxDelay. A settled record forgets its
// history.

// retry is the GC state of one volume.
type retry struct {
	history []time.Time
	timer   supervisor.Stopper
}

// retryDue is sent by a GC timer to the manager: reconcile the volume.
type retryDue struct {
	key volumeKey
}

// gcDelay is the wait before the next reconcile of a volume that failed
// with history behind it, and the new history.
func gcDelay(spec supervisor.Spec, history []time.Time, now time.Time, reason error, r float64) (time.Duration, []time.Time) {
	d := supervisor.Decide(spec, history, now, reason, r)
	if d.Directive != supervisor.Restart {
		return spec.WithDefaults().MaxDelay, d.History
	}
	return d.Delay, d.History
}

// scheduleRetry arms the volume's GC timer unless one is armed.
func (m *manager) scheduleRetry(ctx actor.Context, key volumeKey, reason error) {
	r, ok := m.retries[key]
	if !ok {
		r = &retry{}
		m.retries[key] = r
	}
	if r.timer != nil || m.closing {
		return
	}
	var delay time.Duration
	delay, r.history = gcDelay(m.cfg.Retry, r.history, m.cfg.Clock.Now(), reason, rand.Float64())
	root, self := ctx.ActorSystem().Root, ctx.Self()
	r.timer = m.cfg.Clock.AfterFunc(delay, func() { root.Send(self, &retryDue{key: key}) })
	m.log.Debug("volume not settled: reconcile scheduled", "volume", key.String(), "delay", delay, "failures", len(r.history))
}

// forgetRetry drops the GC state of a settled volume.
func (m *manager) forgetRetry(key volumeKey) {
	if r, ok := m.retries[key]; ok {
		if r.timer != nil {
			r.timer.Stop()
		}
		delete(m.retries, key)
	}
}

func (m *manager) onRetryDue(ctx actor.Context, msg *retryDue) {
	if r, ok := m.retries[msg.key]; ok {
		r.timer = nil
	}
	if m.closing {
		return
	}
	m.enqueue(ctx, &op{kind: opReconcile, key: msg.key})
}

// onPluginAvailable reconciles at once every unsettled volume of the plugin
// that has just registered (or changed its socket).
func (m *manager) onPluginAvailable(ctx actor.Context, plugin string) {
	if m.closing {
		return
	}
	for key, rec := range m.records {
		if rec.GetPluginId() == plugin && !settled(rec) {
			m.forgetRetry(key)
			m.enqueue(ctx, &op{kind: opReconcile, key: key})
		}
	}
}
