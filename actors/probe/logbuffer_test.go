package probe_test

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
)

// logging is a plugin command that logs line once, then serves until ctx
// is done; it checks it was given a directory to work in.
func logging(line string) func(ctx context.Context, dir string, stderr io.Writer) error {
	return func(ctx context.Context, dir string, stderr io.Writer) error {
		if dir == "" {
			return fmt.Errorf("no directory")
		}
		_, _ = io.WriteString(stderr, line+"\n")
		<-ctx.Done()
		return nil
	}
}

func TestRequireAgentLogFormatPassesTheAgentsHclogLines(t *testing.T) {
	failure := runFailing(t, func(tb probe.TB) {
		probe.RequireAgentLogFormat(tb, logging("2026-11-26T01:27:57.293Z [INFO]  demo: serving: address=/x.sock"),
			"serving", `demo: serving: address=\S+\.sock$`)
	})
	require.Empty(t, failure)
}

func TestRequireAgentLogFormatFailsSlogsTextFormat(t *testing.T) {
	failure := runFailing(t, func(tb probe.TB) {
		probe.RequireAgentLogFormat(tb, logging(`time=2026-11-26T01:27:57.293Z level=INFO msg="demo: serving" address=/x.sock`),
			"serving", `demo: serving: address=\S+\.sock$`)
	})
	require.Contains(t, failure, "agent's format")
}
