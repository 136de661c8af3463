package supervisor_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/supervisor"
)

func TestWithDefaults(t *testing.T) {
	cases := []struct {
		name string
		spec supervisor.Spec
		want supervisor.Spec
	}{
		{
			name: "the zero Spec gets every default",
			want: supervisor.Spec{
				MaxRestarts: supervisor.DefaultMaxRestarts, Within: supervisor.DefaultWithin,
				InitialDelay: supervisor.DefaultInitialDelay, MaxDelay: supervisor.DefaultMaxDelay,
				Multiplier: supervisor.DefaultMultiplier, OnGiveUp: supervisor.Stop,
			},
		},
		{
			name: "fields that are set are kept",
			spec: supervisor.Spec{MaxRestarts: 3, Within: time.Hour, InitialDelay: time.Second, MaxDelay: time.Minute, Multiplier: 1.5, Jitter: 0.25, OnGiveUp: supervisor.Escalate},
			want: supervisor.Spec{MaxRestarts: 3, Within: time.Hour, InitialDelay: time.Second, MaxDelay: time.Minute, Multiplier: 1.5, Jitter: 0.25, OnGiveUp: supervisor.Escalate},
		},
		{
			name: "an initial delay longer than the default cap raises the cap to it",
			spec: supervisor.Spec{InitialDelay: time.Minute},
			want: supervisor.Spec{
				MaxRestarts: supervisor.DefaultMaxRestarts, Within: supervisor.DefaultWithin,
				InitialDelay: time.Minute, MaxDelay: time.Minute,
				Multiplier: supervisor.DefaultMultiplier, OnGiveUp: supervisor.Stop,
			},
		},
		{
			name: "a cap shorter than the default initial delay lowers the initial delay to it",
			spec: supervisor.Spec{MaxDelay: 50 * time.Millisecond},
			want: supervisor.Spec{
				MaxRestarts: supervisor.DefaultMaxRestarts, Within: supervisor.DefaultWithin,
				InitialDelay: 50 * time.Millisecond, MaxDelay: 50 * time.Millisecond,
				Multiplier: supervisor.DefaultMultiplier, OnGiveUp: supervisor.Stop,
			},
		},
		{
			name: "bad values are kept for Validate to report",
			spec: supervisor.Spec{MaxRestarts: -1, Within: -time.Second, Multiplier: 0.5, Jitter: 2, OnGiveUp: supervisor.Restart},
			want: supervisor.Spec{
				MaxRestarts: -1, Within: -time.Second,
				InitialDelay: supervisor.DefaultInitialDelay, MaxDelay: supervisor.DefaultMaxDelay,
				Multiplier: 0.5, Jitter: 2, OnGiveUp: supervisor.Restart,
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.spec.WithDefaults()
			require.NotNil(t, got.Decider)
			require.Equal(t, supervisor.Restart, got.Decider("anything"), "the default decider restarts")
			got.Decider = nil
			require.Equal(t, tc.want, got)
		})
	}
}

func TestValidateAcceptsGoodSpecs(t *testing.T) {
	cases := []struct {
		name string
		spec supervisor.Spec
	}{
		{name: "the zero Spec, completed by the defaults", spec: supervisor.Spec{}},
		{name: "the backoff used in these tests", spec: backoffSpec},
		{name: "a constant delay", spec: supervisor.Spec{InitialDelay: time.Second, MaxDelay: time.Second, Multiplier: 1}},
		{name: "full jitter that escalates on giving up", spec: supervisor.Spec{Jitter: 1, OnGiveUp: supervisor.Escalate}},
		{name: "the shortest window allowed", spec: supervisor.Spec{MaxRestarts: 1, Within: supervisor.MinWithin, InitialDelay: time.Microsecond}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, tc.spec.Validate())
			_, err := supervisor.NewStrategy(tc.spec)
			require.NoError(t, err)
		})
	}
}

func TestValidateRejectsBadSpecs(t *testing.T) {
	cases := []struct {
		name string
		spec supervisor.Spec
		want string
	}{
		{name: "a negative restart count", spec: supervisor.Spec{MaxRestarts: -1}, want: "MaxRestarts is -1, must not be negative"},
		{name: "a negative window", spec: supervisor.Spec{Within: -time.Minute}, want: "Within is -1m0s, must be at least 1ms"},
		{name: "a window given as a bare number", spec: supervisor.Spec{Within: 1000}, want: "Within is 1µs, must be at least 1ms"},
		{name: "a negative initial delay", spec: supervisor.Spec{InitialDelay: -time.Second}, want: "InitialDelay is -1s, must not be negative"},
		{name: "a negative cap", spec: supervisor.Spec{MaxDelay: -time.Second}, want: "MaxDelay is -1s, must not be negative"},
		{name: "a cap below the initial delay", spec: supervisor.Spec{InitialDelay: 2 * time.Second, MaxDelay: time.Second}, want: "MaxDelay 1s is shorter than InitialDelay 2s"},
		{name: "a multiplier that shrinks the delay", spec: supervisor.Spec{Multiplier: 0.5}, want: "Multiplier is 0.5, must be a finite number of at least 1"},
		{name: "a negative multiplier", spec: supervisor.Spec{Multiplier: -2}, want: "Multiplier is -2"},
		{name: "a multiplier that is not a number", spec: supervisor.Spec{Multiplier: math.NaN()}, want: "Multiplier is NaN"},
		{name: "an infinite multiplier", spec: supervisor.Spec{Multiplier: math.Inf(1)}, want: "Multiplier is +Inf"},
		{name: "jitter above one", spec: supervisor.Spec{Jitter: 1.5}, want: "Jitter is 1.5, must be a fraction from 0 to 1"},
		{name: "negative jitter", spec: supervisor.Spec{Jitter: -0.1}, want: "Jitter is -0.1"},
		{name: "jitter that is not a number", spec: supervisor.Spec{Jitter: math.NaN()}, want: "Jitter is NaN"},
		{name: "restarting as what to do on giving up", spec: supervisor.Spec{OnGiveUp: supervisor.Restart}, want: "OnGiveUp is restart, must be Stop or Escalate"},
		{name: "an unknown directive on giving up", spec: supervisor.Spec{OnGiveUp: supervisor.Directive(7)}, want: "OnGiveUp is Directive(7)"},
		{
			name: "delays so long that a crash loop never reaches the limit",
			spec: supervisor.Spec{MaxRestarts: 10, Within: 10 * time.Second, InitialDelay: time.Second, MaxDelay: 5 * time.Second},
			want: "the delays before 10 restarts add up to 42s, not less than Within 10s",
		},
		{
			name: "a constant delay too long for the window",
			spec: supervisor.Spec{MaxRestarts: 3, Within: time.Minute, InitialDelay: 20 * time.Second, Multiplier: 1},
			want: "the delays before 3 restarts add up to 1m0s, not less than Within 1m0s",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.spec.Validate()
			require.ErrorIs(t, err, supervisor.ErrInvalidSpec)
			require.ErrorIs(t, err, errclass.Invalid)
			require.ErrorContains(t, err, "invalid spec: "+tc.want)

			strategy, err := supervisor.NewStrategy(tc.spec)
			require.ErrorContains(t, err, tc.want, "NewStrategy rejects it too")
			require.Nil(t, strategy)
		})
	}
}

func TestValidateReportsEveryProblemAtOnce(t *testing.T) {
	err := supervisor.Spec{MaxRestarts: -3, Multiplier: 0.1, Jitter: 3, OnGiveUp: supervisor.Restart}.Validate()
	require.ErrorIs(t, err, supervisor.ErrInvalidSpec)
	lines := strings.Split(err.Error(), "\n")
	require.Len(t, lines, 4, err.Error())
	for i, field := range []string{"MaxRestarts", "Multiplier", "Jitter", "OnGiveUp"} {
		require.True(t, strings.HasPrefix(lines[i], "invalid spec: "+field+" is "), lines[i])
	}
}

func TestNewStrategyRejectsNilOptions(t *testing.T) {
	cases := []struct {
		name string
		opt  supervisor.Option
		want string
	}{
		{name: "a nil clock", opt: supervisor.WithClock(nil), want: "invalid spec: WithClock was given a nil clock"},
		{name: "a nil observer", opt: supervisor.WithObserver(nil), want: "invalid spec: WithObserver was given a nil PID"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			strategy, err := supervisor.NewStrategy(supervisor.Spec{}, tc.opt)
			require.EqualError(t, err, tc.want)
			require.ErrorIs(t, err, supervisor.ErrInvalidSpec)
			require.ErrorIs(t, err, errclass.Invalid)
			require.Nil(t, strategy)
		})
	}
}

func TestStrategyKeepsTheCompletedSpec(t *testing.T) {
	strategy, err := supervisor.NewStrategy(supervisor.Spec{MaxRestarts: 2})
	require.NoError(t, err)
	got := strategy.Spec()
	require.Equal(t, 2, got.MaxRestarts)
	require.Equal(t, supervisor.DefaultWithin, got.Within)
	require.NotNil(t, got.Decider)
}

// A manager that reports an instance that gave up as failed, and leaves it
// stopped, needs OnGiveUp Stop; the refusal names the caller's field.
func TestStopsOnGiveUpRefusesEscalateNamingTheField(t *testing.T) {
	require.NoError(t, supervisor.Spec{}.StopsOnGiveUp("Supervision"), "Stop is the default")
	require.NoError(t, supervisor.Spec{OnGiveUp: supervisor.Stop}.StopsOnGiveUp("Supervision"))
	err := supervisor.Spec{OnGiveUp: supervisor.Escalate}.StopsOnGiveUp("Config.Supervision")
	require.EqualError(t, err, "Config.Supervision.OnGiveUp is escalate, must be stop")
}
