package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// handlerTransport serves every request with h, in process.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

func TestANameReachesTheAgentAsGivenNotEscapedTwice(t *testing.T) {
	mux := http.NewServeMux()
	var got string
	mux.HandleFunc("GET /v1/volumes/{namespace}/{id}", func(w http.ResponseWriter, r *http.Request) {
		got = r.PathValue("id")
		w.WriteHeader(http.StatusOK)
	})
	c := &client{http: &http.Client{Transport: handlerTransport{mux}}}
	for _, name := range []string{"../x", "a b", "50%", "x%2Fy"} {
		resp, err := c.do(context.Background(), "GET", "/v1/volumes/default/"+url.PathEscape(name), nil, nil)
		require.NoError(t, err, name)
		resp.Body.Close()
		require.Equal(t, name, got)
	}
}

func TestWithJSONTheCLIsErrorsAreJSONWithACode(t *testing.T) {
	dir := emptyDataDir(t)
	_, stderr, code := runHere("volume", "mount", "db", "web-1", "-json", "-data-dir", dir)
	require.Equal(t, 1, code)
	var got struct{ Error, Code string }
	require.NoError(t, json.Unmarshal([]byte(stderr), &got), "stderr is one JSON object: %s", stderr)
	require.Equal(t, "no_agent", got.Code)
	require.Contains(t, got.Error, "plugvisor volume mount: no agent is running at "+dir)

	_, stderr, code = runHere("volume", "mount", "db", "-json", "-data-dir", dir)
	require.Equal(t, 2, code)
	require.NoError(t, json.Unmarshal([]byte(stderr), &got), stderr)
	require.Equal(t, "usage", got.Code)
}

func TestAnAPIErrorsCodeIsItsStatusName(t *testing.T) {
	for status, want := range map[int]string{404: "not_found", 409: "conflict", 400: "bad_request", 503: "service_unavailable", 599: "status_599"} {
		require.Equal(t, want, (&apiError{status: status}).Code())
	}
}

func TestDockerPluginsListsDockerPluginsOnly(t *testing.T) {
	discovered := []discoveredJSON{
		{Name: "local", Protocol: "docker", State: "DISCOVERED_PLUGIN_STATE_REGISTERED", Source: "/p/local.sock"},
		{Name: "hostpath", Protocol: "csi", State: "DISCOVERED_PLUGIN_STATE_REGISTERED", Source: "/p/hostpath.sock"},
		{Name: "slow", State: "DISCOVERED_PLUGIN_STATE_ACTIVATING", Source: "/p/slow.sock"},
	}
	var out strings.Builder
	require.NoError(t, printDockerPlugins(&out, commonFlags{}, discovered))
	require.Contains(t, out.String(), "local")
	require.Contains(t, out.String(), "slow", "a plugin that answered no handshake yet may be Docker's")
	require.NotContains(t, out.String(), "hostpath")

	out.Reset()
	require.NoError(t, printDockerPlugins(&out, commonFlags{json: true}, discovered))
	require.NotContains(t, out.String(), "hostpath", "nor under -json")

	out.Reset()
	require.NoError(t, printDockerPlugins(&out, commonFlags{}, discovered[1:2]))
	require.Equal(t, "no Docker plugins found on disk\n", out.String())
}

func TestADockerVolumeCommandShowsProgressWhileItWaitsOnATerminal(t *testing.T) {
	dir := emptyDataDir(t)
	var stdout, stderr bytes.Buffer
	fakeTerminal(t, &stderr)
	require.Equal(t, 1, run([]string{"docker", "volume", "inspect", "db", "-data-dir", dir}, &stdout, &stderr))
	line, _, _ := strings.Cut(stderr.String(), "plugvisor docker volume inspect:")
	require.Regexp(t, `^(\r\033\[K[-\\|/] docker volume inspect db: waiting for the agent and the driver \(\d+s\))+\r\033\[K$`, line,
		"one frame or more (a loaded machine draws several), then the line is cleared")

	stderr.Reset()
	require.Equal(t, 1, run([]string{"docker", "volume", "inspect", "db", "-json", "-data-dir", dir}, &stdout, &stderr))
	require.True(t, strings.HasPrefix(stderr.String(), "{"), "no progress under -json: %q", stderr.String())
}

// A drain's 409 is read as "draining already" only when the node is
// draining: any other conflict is the drain's failure, not a wait.
func TestADrainConflictOnANodeNotDrainingIsAnError(t *testing.T) {
	for _, draining := range []bool{false, true} {
		mux := http.NewServeMux()
		mux.HandleFunc("POST /v1/fleet/nodes/{node}/drain", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusConflict)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "conflict: something else", "code": "conflict"})
		})
		mux.HandleFunc("GET /v1/fleet/nodes", func(w http.ResponseWriter, r *http.Request) {
			_ = json.NewEncoder(w).Encode(map[string]any{"nodes": []map[string]any{{"id": "n2", "draining": draining, "claims": []any{}}}})
		})
		c := &client{http: &http.Client{Transport: handlerTransport{mux}}}
		var out bytes.Buffer
		err := nodeDrain(context.Background(), c, commonFlags{}, "n2", time.Minute, false, &out)
		if !draining {
			require.ErrorContains(t, err, "conflict: something else")
			require.NotContains(t, out.String(), "draining already")
			continue
		}
		require.NoError(t, err)
		require.Contains(t, out.String(), "node n2 was draining already")
		require.Contains(t, out.String(), "node n2 is drained")
	}
}
