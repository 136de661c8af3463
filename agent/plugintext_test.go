package agent_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/api"
)

// TestAPluginsHostileErrorIsCutBeforeTheAPIAndTheLog is attack 5 of issue
// 39: a plugin's 3 MB error message, with a fake log line, U+202E and
// bytes that are not UTF-8, was echoed into the API's answer and logged as
// one 3.1 MB line. The answer, the volume's status and every log line now
// hold at most about 1 KiB of it, as one line of UTF-8 without control or
// bidirectional characters.
func TestAPluginsHostileErrorIsCutBeforeTheAPIAndTheLog(t *testing.T) {
	var logs probe.LogBuffer
	a, plugin, c := startWithHangingPlugin(t, agent.Config{DataDir: dataDir(t), Logger: logTo(&logs)})
	createDB(t, a, c, http.StatusCreated)

	hostile := "mount failed\nlevel=INFO msg=\"all good\" \u202Egnp.exe\xff" + strings.Repeat("x", 3<<20)
	plugin.failWith("NodePublishVolume", status.Error(codes.Internal, hostile))
	code, body, err := call(c, "POST", "http://plugvisor/v1/volumes/default/db/mount", "", `{"alloc_id":"web-1"}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusBadGateway, code, "%.300s", body)
	require.LessOrEqual(t, len(body), 2048, "the answer: %.200s", body)
	var answer struct{ Error string }
	require.NoError(t, json.Unmarshal([]byte(body), &answer))
	requireSafe(t, "the answer's error", answer.Error)
	require.Contains(t, answer.Error, `mount failed level=INFO msg="all good" gnp.exe`)

	code, body, err = call(c, "GET", "http://plugvisor/v1/volumes/default/db/status", "", "")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, "%.300s", body)
	var st api.StatusJSON
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	require.Contains(t, st.LastError, "gnp.exe")
	requireSafe(t, "the volume's last error", st.LastError)
	for _, line := range strings.Split(logs.String(), "\n") {
		requireSafe(t, "a log line", line)
	}
}

// requireSafe fails unless s (what) holds at most 2 KiB of valid UTF-8 on
// one line, without U+202E.
func requireSafe(t *testing.T, what, s string) {
	t.Helper()
	require.LessOrEqual(t, len(s), 2048, "%s: %.200s", what, s)
	require.True(t, utf8.ValidString(s), what)
	require.NotContains(t, s, "\u202E", what)
	require.NotContains(t, s, `\u202e`, what)
	require.NotContains(t, strings.TrimSuffix(s, "\n"), "\n", what)
}
