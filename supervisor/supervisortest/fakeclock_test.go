package supervisortest_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/plugvisor/plugvisor/supervisor"
	"github.com/plugvisor/plugvisor/supervisor/supervisortest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var start = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// timer is one timer a case sets, in the order given.
type timer struct {
	name  string
	delay time.Duration
}

// firing records, for each timer that fires, its name and the clock's time.
type firing struct {
	name string
	at   time.Duration
}

func TestFakeClockAdvance(t *testing.T) {
	cases := []struct {
		name     string
		timers   []timer
		stop     []string
		advances []time.Duration
		want     []firing
		pending  int
	}{
		{
			name:     "a timer does not fire a nanosecond early",
			timers:   []timer{{"a", time.Second}},
			advances: []time.Duration{time.Second - time.Nanosecond},
			pending:  1,
		},
		{
			name:     "a timer fires when the clock reaches it",
			timers:   []timer{{"a", time.Second}},
			advances: []time.Duration{time.Second - time.Nanosecond, time.Nanosecond},
			want:     []firing{{"a", time.Second}},
		},
		{
			name:     "timers fire in order of due time, reading their due time",
			timers:   []timer{{"late", 3 * time.Second}, {"early", time.Second}, {"middle", 2 * time.Second}},
			advances: []time.Duration{time.Minute},
			want:     []firing{{"early", time.Second}, {"middle", 2 * time.Second}, {"late", 3 * time.Second}},
		},
		{
			name:     "a stopped timer never fires",
			timers:   []timer{{"kept", time.Second}, {"stopped", time.Second}},
			stop:     []string{"stopped"},
			advances: []time.Duration{time.Minute},
			want:     []firing{{"kept", time.Second}},
		},
		{
			name:     "a timer with no delay fires at the next Advance, even by zero",
			timers:   []timer{{"now", 0}, {"negative", -time.Second}},
			advances: []time.Duration{0},
			want:     []firing{{"now", 0}, {"negative", 0}},
		},
		{
			name:     "timers due at the same time fire in the order they were set",
			timers:   []timer{{"first", time.Second}, {"second", time.Second}, {"third", time.Second}},
			advances: []time.Duration{time.Second},
			want:     []firing{{"first", time.Second}, {"second", time.Second}, {"third", time.Second}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := supervisortest.NewFakeClock(start)
			var got []firing
			stoppers := map[string]supervisor.Stopper{}
			for _, tm := range tc.timers {
				stoppers[tm.name] = clock.AfterFunc(tm.delay, func() {
					got = append(got, firing{tm.name, clock.Now().Sub(start)})
				})
			}
			for _, name := range tc.stop {
				require.True(t, stoppers[name].Stop(), "a pending timer stops")
				require.False(t, stoppers[name].Stop(), "a stopped timer stops once")
			}
			var total time.Duration
			for _, d := range tc.advances {
				clock.Advance(d)
				total += d
			}
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.pending, clock.Pending())
			require.Equal(t, start.Add(total), clock.Now(), "the clock ends where Advance took it")
		})
	}
}

func TestFakeClockFiresTimersSetByTimersWhenDue(t *testing.T) {
	clock := supervisortest.NewFakeClock(start)
	var got []time.Duration
	var tick func()
	tick = func() {
		got = append(got, clock.Now().Sub(start))
		clock.AfterFunc(time.Second, tick)
	}
	clock.AfterFunc(time.Second, tick)

	clock.Advance(3500 * time.Millisecond)
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}, got)
	require.Equal(t, 1, clock.Pending())
}

func TestFakeClockTimerThatFiredDoesNotStop(t *testing.T) {
	clock := supervisortest.NewFakeClock(start)
	timer := clock.AfterFunc(time.Second, func() {})
	clock.Advance(time.Second)
	require.False(t, timer.Stop())
}
