package volumes

import (
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/supervisor"
)

// StatsSample is the node plugin's latest answer to the periodic
// NodeGetVolumeStats of one published volume (see Config.StatsInterval).
type StatsSample struct {
	Namespace, VolumeID, PluginID string
	// Usage is the plugin's usage (bytes, inodes) as it gave it; empty
	// when it answered only a condition (or NotFound).
	Usage []*messages.VolumeUsage
	// ConditionKnown says whether the plugin said how the volume is (a
	// volume condition, or NotFound); Abnormal is what it said.
	ConditionKnown, Abnormal bool
}

// statsDue is sent to the manager by its timer: a round of stats is due.
type statsDue struct{}

// statsPolled is sent by a stats poll to the manager with its answer.
type statsPolled struct {
	key    volumeKey
	target string
	stats  *messages.VolumeStats
	err    error
}

// statsPoll is the manager's state of the periodic stats: which volumes
// wait for their RPC, which have one in flight, and the latest samples,
// published for VolumeStats (readers never wait on the mailbox).
type statsPoll struct {
	timer     supervisor.Stopper
	waiting   []volumeKey
	inFlight  map[volumeKey]bool
	samples   map[volumeKey]StatsSample
	published func([]StatsSample)
}

// scheduleStats arms the timer of the next round, jittered by a tenth of
// the interval, so that nodes started together do not ask together.
func (m *manager) scheduleStats(ctx actor.Context) {
	every := m.cfg.StatsInterval
	if every <= 0 || m.closing || m.cfg.StatsSupported == nil {
		return
	}
	jitter := time.Duration((rand.Float64()*0.2 - 0.1) * float64(every))
	root, self := ctx.ActorSystem().Root, ctx.Self()
	m.stats.timer = m.cfg.Clock.AfterFunc(every+jitter, func() { root.Send(self, &statsDue{}) })
}

// stopStats stops the timer.
func (m *manager) stopStats() {
	if m.stats.timer != nil {
		m.stats.timer.Stop()
		m.stats.timer = nil
	}
}

// onStatsDue queues a stats RPC for every published volume whose node
// plugin advertises GET_VOLUME_STATS, except those with an operation
// running or waiting (their answer could describe a half-done step) and
// those whose last RPC has not answered yet: a slow plugin gets one RPC
// per volume at a time, never a pile.
func (m *manager) onStatsDue(ctx actor.Context) {
	m.scheduleStats(ctx)
	keys := make([]volumeKey, 0, len(m.records))
	for key, rec := range m.records {
		if m.statsWanted(key, rec) && !slices.Contains(m.stats.waiting, key) {
			keys = append(keys, key)
		}
	}
	slices.SortFunc(keys, func(a, b volumeKey) int { return strings.Compare(a.String(), b.String()) })
	m.stats.waiting = append(m.stats.waiting, keys...)
	m.pollStats(ctx)
}

// statsWanted says whether the volume's stats may be asked now.
func (m *manager) statsWanted(key volumeKey, rec *messages.VolumeRecord) bool {
	_, queued := m.queues[key]
	return firstPublished(rec) != nil && !queued && !m.stats.inFlight[key] && m.cfg.StatsSupported(rec.GetPluginId())
}

// pollStats starts stats RPCs for the waiting volumes, at most
// Config.StatsConcurrency at once. Each runs on a goroutine, outside the
// volume's queue, within one RPC timeout, and comes back as statsPolled.
func (m *manager) pollStats(ctx actor.Context) {
	root, self := ctx.ActorSystem().Root, ctx.Self()
	for len(m.stats.inFlight) < m.cfg.StatsConcurrency && len(m.stats.waiting) > 0 && !m.closing {
		key := m.stats.waiting[0]
		m.stats.waiting = m.stats.waiting[1:]
		rec := m.records[key]
		if !m.statsWanted(key, rec) {
			continue
		}
		pub := firstPublished(rec)
		m.stats.inFlight[key] = true
		m.askStats(key, rec, pub, func(stats *messages.VolumeStats, err error) {
			root.Send(self, &statsPolled{key: key, target: pub.GetTargetPath(), stats: stats, err: err})
		})
	}
}

// onStatsPolled keeps the answer as the volume's sample while the volume
// is still published at the target asked, and queues the recording of a
// changed condition (a write to the store, no RPC).
func (m *manager) onStatsPolled(ctx actor.Context, msg *statsPolled) {
	delete(m.stats.inFlight, msg.key)
	defer m.pollStats(ctx)
	rec := m.records[msg.key]
	if pub := firstPublished(rec); pub == nil || pub.GetTargetPath() != msg.target {
		m.dropSample(msg.key)
		return
	}
	want, known := conditionOf(msg.stats, msg.err)
	if msg.err != nil && !known {
		m.log.Debug("periodic NodeGetVolumeStats failed", "volume", msg.key.String(), "error", msg.err)
		return
	}
	m.stats.samples[msg.key] = StatsSample{
		Namespace: msg.key.namespace, VolumeID: msg.key.id, PluginID: rec.GetPluginId(),
		Usage: msg.stats.GetUsage(), ConditionKnown: msg.err != nil || msg.stats.GetCondition() != nil, Abnormal: want != "",
	}
	m.publishSamples()
	if known && (msg.err != nil || msg.stats.GetCondition() != nil) && want != rec.GetCondition() {
		if _, queued := m.queues[msg.key]; !queued {
			m.enqueue(ctx, &op{kind: opCondition, key: msg.key, condition: want, target: msg.target})
		}
	}
}

// recordCondition is the body of a condition job: it records the
// condition the periodic stats found, if the volume is still published at
// the target they asked.
func (j *job) recordCondition(want, target string) error {
	pub := firstPublished(j.rec)
	if pub == nil || pub.GetTargetPath() != target || j.rec.GetCondition() == want {
		return nil
	}
	j.noteCondition(pub, want)
	return j.save()
}

// onConditionDone ends a condition job: it is no operation of the
// volume's, so the volume's last operation and retries stay as they were.
func (m *manager) onConditionDone(ctx actor.Context, msg *jobDone) {
	m.running--
	if msg.err != nil {
		m.log.Warn("could not record the volume's condition", "volume", msg.op.key.String(), "error", msg.err)
	}
	m.runNext(ctx, msg.op.key)
	m.finishShutdown(ctx)
}

// dropSample forgets the volume's sample: it is no longer published here.
func (m *manager) dropSample(key volumeKey) {
	if _, ok := m.stats.samples[key]; ok {
		delete(m.stats.samples, key)
		m.publishSamples()
	}
}

// publishSamples hands a copy of the samples, sorted, to VolumeStats.
func (m *manager) publishSamples() {
	out := make([]StatsSample, 0, len(m.stats.samples))
	for _, s := range m.stats.samples {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b StatsSample) int {
		return strings.Compare(a.Namespace+"/"+a.VolumeID, b.Namespace+"/"+b.VolumeID)
	})
	m.stats.published(out)
}
