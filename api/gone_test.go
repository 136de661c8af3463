package api

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi"
)

// loggedServer is a Server with no parts, logging at level into logs.
func loggedServer(level hclog.Level) (*Server, *bytes.Buffer) {
	logs := &bytes.Buffer{}
	return &Server{Logger: hclog.New(&hclog.LoggerOptions{Level: level, Output: logs})}, logs
}

// A request whose caller went away (its context cancelled) before the
// answer is no failure of the agent's: it is logged as news, not an
// ERROR, and answered 499 (client closed request), never 500. A cancel
// of the agent's own, the caller still waiting, stays a 500.
func TestAnAnswerToACallerThatWentAwayIsNoError(t *testing.T) {
	s, logs := loggedServer(hclog.Trace)
	err := fmt.Errorf("waiting for the catalog's answer: %w", context.Canceled)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w := httptest.NewRecorder()
	s.writeError(w, httptest.NewRequest("GET", "/v1/volumes/default/v", nil).WithContext(ctx), err)
	require.Equal(t, statusClientClosed, w.Code)
	require.Contains(t, w.Body.String(), `"code": "client_closed_request"`)
	require.NotContains(t, logs.String(), "[ERROR]")
	require.Contains(t, logs.String(), "the caller went away before its answer")

	// A plugin's call that the caller's going away cancelled alike.
	logs.Reset()
	w = httptest.NewRecorder()
	s.writeError(w, httptest.NewRequest("POST", "/v1/volumes/default/v/mount", nil).WithContext(ctx),
		fmt.Errorf("NodePublishVolume: %w: context canceled", csi.ErrCanceled))
	require.Equal(t, statusClientClosed, w.Code)
	require.NotContains(t, logs.String(), "[WARN]")

	logs.Reset()
	w = httptest.NewRecorder()
	s.writeError(w, httptest.NewRequest("GET", "/v1/volumes/default/v", nil), err)
	require.Equal(t, 500, w.Code)
	require.Contains(t, logs.String(), "[ERROR]")

	// The server stopping cancels its requests with ErrStopping as the
	// cause: the callers still wait, and are told 503, shut down.
	logs.Reset()
	stopping, stop := context.WithCancelCause(context.Background())
	stop(ErrStopping)
	w = httptest.NewRecorder()
	s.writeError(w, httptest.NewRequest("GET", "/v1/volumes/default/v", nil).WithContext(stopping), err)
	require.Equal(t, 503, w.Code)
	require.Contains(t, w.Body.String(), `"code": "shut_down"`)
	require.Contains(t, w.Body.String(), "the agent is stopping")
	require.NotContains(t, logs.String(), "went away")
}
