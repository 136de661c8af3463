package supervisor_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/supervisor"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// at returns the times t0+offset, oldest first as the offsets are given.
func at(offsets ...time.Duration) []time.Time {
	times := make([]time.Time, 0, len(offsets))
	for _, o := range offsets {
		times = append(times, t0.Add(o))
	}
	return times
}

const s = time.Second

// backoffSpec restarts at most 5 times a minute after 1s, 2s, 4s, 5s, 5s.
var backoffSpec = supervisor.Spec{
	MaxRestarts:  5,
	Within:       time.Minute,
	InitialDelay: 1 * s,
	MaxDelay:     5 * s,
	Multiplier:   2,
}

func withSpec(change func(*supervisor.Spec)) supervisor.Spec {
	spec := backoffSpec
	change(&spec)
	return spec
}

func decideBy(reason any) supervisor.Directive {
	switch reason {
	case "fatal":
		return supervisor.Stop
	case "upstream":
		return supervisor.Escalate
	case "nonsense":
		return supervisor.Directive(42)
	default:
		return supervisor.Restart
	}
}

func TestDecide(t *testing.T) {
	cases := []struct {
		name    string
		spec    supervisor.Spec
		history []time.Time
		now     time.Duration
		reason  any
		want    supervisor.Decision
	}{
		{
			name: "a first failure restarts after the initial delay",
			spec: backoffSpec, now: 0,
			want: supervisor.Decision{Directive: supervisor.Restart, Delay: 1 * s, Failures: 1, History: at(0)},
		},
		{
			name: "a second failure in the window doubles the delay",
			spec: backoffSpec, history: at(0), now: 10 * s,
			want: supervisor.Decision{Directive: supervisor.Restart, Delay: 2 * s, Failures: 2, History: at(0, 10*s)},
		},
		{
			name: "a third failure in the window doubles it again",
			spec: backoffSpec, history: at(0, 1*s), now: 3 * s,
			want: supervisor.Decision{Directive: supervisor.Restart, Delay: 4 * s, Failures: 3, History: at(0, 1*s, 3*s)},
		},
		{
			name: "the delay stops growing at MaxDelay",
			spec: backoffSpec, history: at(0, 1*s, 3*s), now: 7 * s,
			want: supervisor.Decision{Directive: supervisor.Restart, Delay: 5 * s, Failures: 4, History: at(0, 1*s, 3*s, 7*s)},
		},
		{
			name: "the last restart the limit allows waits MaxDelay",
			spec: backoffSpec, history: at(0, 1*s, 3*s, 7*s), now: 12 * s,
			want: supervisor.Decision{Directive: supervisor.Restart, Delay: 5 * s, Failures: 5, History: at(0, 1*s, 3*s, 7*s, 12*s)},
		},
		{
			name: "a multiplier of 1 keeps the delay constant",
			spec: withSpec(func(sp *supervisor.Spec) { sp.Multiplier = 1 }), history: at(0, 1*s, 2*s), now: 3 * s,
			want: supervisor.Decision{Directive: supervisor.Restart, Delay: 1 * s, Failures: 4, History: at(0, 1*s, 2*s, 3*s)},
		},
		{
			name: "failures older than the window are forgotten",
			spec: backoffSpec, history: at(0, 1*s, 3*s), now: 2 * time.Minute,
			want: supervisor.Decision{Directive: supervisor.Restart, Delay: 1 * s, Failures: 1, History: at(2 * time.Minute)},
		},
		{
			name: "a failure exactly one window ago is forgotten",
			spec: backoffSpec, history: at(0, 30*s), now: time.Minute,
			want: supervisor.Decision{Directive: supervisor.Restart, Delay: 2 * s, Failures: 2, History: at(30*s, time.Minute)},
		},
		{
			name: "the window slides: only the failures inside it count",
			spec: backoffSpec, history: at(0, 5*s, 30*s, 50*s), now: 70 * s,
			want: supervisor.Decision{Directive: supervisor.Restart, Delay: 4 * s, Failures: 3, History: at(30*s, 50*s, 70*s)},
		},
		{
			name: "one failure past the limit gives up and stops",
			spec: backoffSpec, history: at(0, 1*s, 3*s, 7*s, 12*s), now: 17 * s,
			want: supervisor.Decision{Directive: supervisor.Stop, GaveUp: true, Failures: 6, History: at(0, 1*s, 3*s, 7*s, 12*s, 17*s)},
		},
		{
			name:    "one failure past the limit gives up and escalates when OnGiveUp says so",
			spec:    withSpec(func(sp *supervisor.Spec) { sp.OnGiveUp = supervisor.Escalate }),
			history: at(0, 1*s, 3*s, 7*s, 12*s), now: 17 * s,
			want: supervisor.Decision{Directive: supervisor.Escalate, GaveUp: true, Failures: 6, History: at(0, 1*s, 3*s, 7*s, 12*s, 17*s)},
		},
		{
			name: "the limit counts only failures inside the window",
			spec: backoffSpec, history: at(0, 20*s, 30*s, 40*s, 50*s), now: 61 * s,
			want: supervisor.Decision{Directive: supervisor.Restart, Delay: 5 * s, Failures: 5, History: at(20*s, 30*s, 40*s, 50*s, 61*s)},
		},
		{
			name: "the decider stops the child on a reason it cannot recover from",
			spec: withSpec(func(sp *supervisor.Spec) { sp.Decider = decideBy }), history: at(0), now: 1 * s, reason: "fatal",
			want: supervisor.Decision{Directive: supervisor.Stop, Failures: 2, History: at(0, 1*s)},
		},
		{
			name: "the decider escalates a reason that is the parent's business",
			spec: withSpec(func(sp *supervisor.Spec) { sp.Decider = decideBy }), now: 0, reason: "upstream",
			want: supervisor.Decision{Directive: supervisor.Escalate, Failures: 1, History: at(0)},
		},
		{
			name: "the decider restarts other reasons under the limits",
			spec: withSpec(func(sp *supervisor.Spec) { sp.Decider = decideBy }), history: at(0), now: 1 * s, reason: "flaky",
			want: supervisor.Decision{Directive: supervisor.Restart, Delay: 2 * s, Failures: 2, History: at(0, 1*s)},
		},
		{
			name: "a directive the decider should not return escalates",
			spec: withSpec(func(sp *supervisor.Spec) { sp.Decider = decideBy }), now: 0, reason: "nonsense",
			want: supervisor.Decision{Directive: supervisor.Escalate, Failures: 1, History: at(0)},
		},
		{
			name: "the zero Spec restarts after the default delay",
			now:  0,
			want: supervisor.Decision{Directive: supervisor.Restart, Delay: supervisor.DefaultInitialDelay, Failures: 1, History: at(0)},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := supervisor.Decide(tc.spec, tc.history, t0.Add(tc.now), tc.reason, 0)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestDecideJitterTakesOffAtMostItsFraction(t *testing.T) {
	cases := []struct {
		name     string
		jitter   float64
		failures int
		rand     float64
		least    time.Duration
		most     time.Duration
	}{
		{name: "no jitter leaves the delay whole", jitter: 0, failures: 2, rand: 0.9, least: 2 * s, most: 2 * s},
		{name: "a zero draw leaves the delay whole", jitter: 0.5, failures: 2, rand: 0, least: 2 * s, most: 2 * s},
		{name: "a draw of one half takes off half the fraction", jitter: 0.5, failures: 2, rand: 0.5, least: 1500 * time.Millisecond, most: 1500 * time.Millisecond},
		{name: "the largest draw stays within the fraction", jitter: 0.5, failures: 2, rand: 0.999999, least: 1 * s, most: 2 * s},
		{name: "jitter never lifts a capped delay above MaxDelay", jitter: 0.3, failures: 5, rand: 0.2, least: 3500 * time.Millisecond, most: 5 * s},
		{name: "full jitter may take off almost all of it", jitter: 1, failures: 3, rand: 0.999999, least: 0, most: time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := withSpec(func(sp *supervisor.Spec) { sp.Jitter = tc.jitter })
			history := make([]time.Time, tc.failures-1)
			for i := range history {
				history[i] = t0.Add(time.Duration(i) * time.Millisecond)
			}
			got := supervisor.Decide(spec, history, t0.Add(time.Second), nil, tc.rand)
			require.Equal(t, supervisor.Restart, got.Directive)
			require.Equal(t, tc.failures, got.Failures)
			require.GreaterOrEqual(t, got.Delay, tc.least)
			require.LessOrEqual(t, got.Delay, tc.most)
		})
	}
}

func TestDecideLeavesTheCallersHistoryAlone(t *testing.T) {
	cases := []struct {
		name string
		now  time.Duration
	}{
		{name: "when it keeps every earlier failure", now: 2 * s},
		{name: "when it forgets every earlier failure", now: 2 * time.Minute},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			history := make([]time.Time, 2, 10)
			copy(history, at(0, 1*s))
			got := supervisor.Decide(backoffSpec, history, t0.Add(tc.now), nil, 0)

			require.Equal(t, at(0, 1*s), history, "the history passed in is unchanged")
			require.True(t, history[:3][2].IsZero(), "nothing was appended into the caller's array")
			got.History[0] = time.Time{}
			require.Equal(t, at(0, 1*s), history, "the returned history has an array of its own")
		})
	}
}
