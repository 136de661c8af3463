package api

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
)

// A request whose caller went away (its context cancelled) before the
// answer is no failure of the agent's: it is logged as news, not an
// ERROR, and answered 499 (client closed request), never 500. A cancel
// of the agent's own, the caller still waiting, stays a 500.
func TestAnAnswerToACallerThatWentAwayIsNoError(t *testing.T) {
	var logs bytes.Buffer
	s := &Server{Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, Output: &logs})}
	err := fmt.Errorf("waiting for the catalog's answer: %w", context.Canceled)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w := httptest.NewRecorder()
	s.writeError(w, httptest.NewRequest("GET", "/v1/volumes/default/v", nil).WithContext(ctx), err)
	require.Equal(t, statusClientClosed, w.Code)
	require.Contains(t, w.Body.String(), `"code": "client_closed_request"`)
	require.NotContains(t, logs.String(), "[ERROR]")
	require.Contains(t, logs.String(), "the caller went away before its answer")

	logs.Reset()
	w = httptest.NewRecorder()
	s.writeError(w, httptest.NewRequest("GET", "/v1/volumes/default/v", nil), err)
	require.Equal(t, 500, w.Code)
	require.Contains(t, logs.String(), "[ERROR]")
}
