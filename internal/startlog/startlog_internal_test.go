package startlog

import (
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
)

func TestAStartLogHoldsLinesUntilTheStartIsDecided(t *testing.T) {
	for _, tc := range []struct {
		name    string
		decide  func(*Logger)
		wantLog []string
	}{
		{
			name:   "a start that succeeds writes the held lines in order, named, then lets lines through",
			decide: (*Logger).Succeeded,
			wantLog: []string{"[INFO]  agent.registry: first: n=1", "[WARN]  agent: second", "[DEBUG] agent.api: third: k=v",
				"[ERROR] agent.registry: after the start"},
		},
		{
			name:   "a start that fails drops the held lines and every later one",
			decide: (*Logger).Failed,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out probe.LogBuffer
			log := New(hclog.New(&hclog.LoggerOptions{Name: "agent", Level: hclog.Debug, Output: &out}))
			registry := log.Named("registry")
			registry.Info("first", "n", 1)
			log.Warn("second")
			log.Named("api").With("k", "v").Debug("third")
			log.Trace("below the level")
			require.Empty(t, out.String(), "nothing is written before the start is decided")

			tc.decide(log)
			registry.Error("after the start")
			var got []string
			for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				if _, rest, ok := strings.Cut(line, " "); ok {
					got = append(got, rest)
				}
			}
			require.Equal(t, tc.wantLog, got)
		})
	}
}
