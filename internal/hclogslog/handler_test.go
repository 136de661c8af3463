package hclogslog_test

import (
	"bytes"
	"log/slog"
	"regexp"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/internal/hclogslog"
)

// agentLine is one line of the agent's log: time, level, name, message and
// key=value pairs.
var agentLine = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z?[+-]?[\d:]* \[(INFO|WARN|ERROR)\] +(\S+): (.+?)(: .*)?$`)

// TestSlogThroughTheHandlerLogsInTheAgentsFormat: a library that logs
// through log/slog (protoactor) logs, through the handler, as the agent's
// hclog does: levels, name, message, key=value pairs, groups as prefixes.
func TestSlogThroughTheHandlerLogsInTheAgentsFormat(t *testing.T) {
	var agent, plugin bytes.Buffer
	hclog.New(&hclog.LoggerOptions{Name: "plugvisor", Level: hclog.Info, Output: &agent}).Info("agent started", "pid", 1)
	log := slog.New(hclogslog.New(hclog.New(&hclog.LoggerOptions{Name: "docker-volume-plugin", Level: hclog.Info, Output: &plugin}), nil))
	log.Info("volume created", "volume", "db", "path", "/v/db")
	log.Debug("not shown")
	log.With("volume", "db").WithGroup("mount").Warn("slow", "id", "c1")

	require.Regexp(t, agentLine, firstLine(agent.String()))
	lines := regexp.MustCompile("\n").Split(plugin.String(), -1)
	require.Len(t, lines, 3, "two lines and the end: nothing below INFO")
	m := agentLine.FindStringSubmatch(lines[0])
	require.NotNil(t, m, lines[0])
	require.Equal(t, []string{"INFO", "docker-volume-plugin", "volume created", ": volume=db path=/v/db"}, m[1:])
	m = agentLine.FindStringSubmatch(lines[1])
	require.NotNil(t, m, lines[1])
	require.Equal(t, []string{"WARN", "docker-volume-plugin", "slow", ": volume=db mount.id=c1"}, m[1:])
}

func firstLine(s string) string {
	line, _, _ := bytes.Cut([]byte(s), []byte("\n"))
	return string(line)
}
