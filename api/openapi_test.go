package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/dockervolume/localvolume"
)

// loadSpec parses and validates openapi.yaml, as the agent serves it.
func loadSpec(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.Spec)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(loader.Context), "openapi.yaml is a valid OpenAPI 3 document")
	return doc
}

// operations are the spec's operations as "METHOD /path", with the query
// parameters of each.
func operations(doc *openapi3.T) map[string][]string {
	out := map[string][]string{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			query := []string{}
			for _, p := range slices.Concat(item.Parameters, op.Parameters) {
				if p.Value.In == openapi3.ParameterInQuery {
					query = append(query, p.Value.Name)
				}
			}
			out[method+" "+path] = query
		}
	}
	return out
}

// TestEveryRouteIsDescribedAndEveryDescriptionIsServed holds the mux and
// the description to each other: the same operations, each taking the
// same query parameters, and every described operation reaches a handler
// (neither "no such endpoint" nor "method not allowed").
func TestEveryRouteIsDescribedAndEveryDescriptionIsServed(t *testing.T) {
	doc := loadSpec(t)
	b := newBackend(t)
	b.server.Metrics = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("m 1\n")) })
	served := api.RoutesOf(b.server)
	served["GET /metrics"] = nil
	described := operations(doc)
	for op := range described {
		_, ok := served[op]
		require.True(t, ok, "%s is described but not served", op)
	}
	for op, query := range served {
		want, ok := described[op]
		require.True(t, ok, "%s is served but not described in openapi.yaml", op)
		require.ElementsMatch(t, query, want, "%s: the query parameters served and described", op)
	}
	h := b.server.Handler()
	// A request whose client is gone: the event stream ends at once.
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for op := range described {
		method, path, _ := strings.Cut(op, " ")
		path = strings.NewReplacer("{", "", "}", "").Replace(path)
		req := httptest.NewRequestWithContext(gone, method, "http://plugvisor"+path, strings.NewReader("{}"))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.NotContains(t, rec.Body.String(), "no such endpoint", op)
		require.NotEqual(t, http.StatusMethodNotAllowed, rec.Code, op)
	}
}

// TestTheSpecIsServed: GET /v1/openapi.yaml is the embedded description.
func TestTheSpecIsServed(t *testing.T) {
	b := newBackend(t)
	got := serve(t, b.server.HandlerFor(unixListener), request{method: "GET", path: "/v1/openapi.yaml"})
	require.Equal(t, http.StatusOK, got.status)
	require.Equal(t, "application/yaml", got.header.Get("Content-Type"))
	require.Equal(t, string(api.Spec), got.body)
}

// specClient sends requests to a real agent over its unix socket and
// checks each request and response against openapi.yaml.
type specClient struct {
	t       *testing.T
	router  routers.Router
	http    *http.Client
	covered map[string]bool
}

func newSpecClient(t *testing.T, doc *openapi3.T, socket string) *specClient {
	t.Helper()
	router, err := gorillamux.NewRouter(doc)
	require.NoError(t, err)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}}}
	t.Cleanup(client.CloseIdleConnections)
	return &specClient{t: t, router: router, http: client, covered: map[string]bool{}}
}

// request builds a request and finds its described operation.
func (c *specClient) request(ctx context.Context, method, path, body string) *openapi3filter.RequestValidationInput {
	c.t.Helper()
	var reader io.Reader
	if body != "" {
		reader = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://plugvisor"+path, reader)
	require.NoError(c.t, err)
	if method != http.MethodGet {
		req.Header.Set("Content-Type", "application/json")
	}
	route, params, err := c.router.FindRoute(req)
	require.NoError(c.t, err, "%s %s is described in openapi.yaml", method, path)
	return &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{MultiError: true}}
}

// do sends a request, which the description must accept when want is a
// success; it requires the status want and an answer the description
// allows, and returns the answer's body.
func (c *specClient) do(method, path, body string, want int) []byte {
	c.t.Helper()
	return c.send(method, path, body, want, want < 300, false)
}

// refuse sends a request that both the description and the agent refuse
// (400): a body or a query value the schemas exclude. (The description
// cannot exclude unknown query parameters; the agent does.)
func (c *specClient) refuse(method, path, body string) {
	c.t.Helper()
	c.send(method, path, body, http.StatusBadRequest, false, true)
}

// send sends a request that the description must accept when valid, and
// refuse when refused.
func (c *specClient) send(method, path, body string, want int, valid, refused bool) []byte {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	in := c.request(ctx, method, path, body)
	reqErr := openapi3filter.ValidateRequest(ctx, in)
	if valid {
		require.NoError(c.t, reqErr, "openapi.yaml accepts %s %s %s", method, path, body)
	}
	if refused {
		require.Error(c.t, reqErr, "openapi.yaml refuses %s %s %s, as the agent does", method, path, body)
	}
	resp, err := c.http.Do(in.Request)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	require.Equal(c.t, want, resp.StatusCode, "%s %s: %s", method, path, got)
	c.validate(ctx, in, resp, got)
	return got
}

// stream reads n lines of an NDJSON response, then hangs up; the lines
// are checked against the description like any response.
func (c *specClient) stream(path string, n int, during func()) [][]byte {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	in := c.request(ctx, "GET", path, "")
	require.NoError(c.t, openapi3filter.ValidateRequest(ctx, in))
	resp, err := c.http.Do(in.Request)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	require.Equal(c.t, http.StatusOK, resp.StatusCode)
	lines := bufio.NewScanner(resp.Body)
	var out [][]byte
	for len(out) < n {
		if len(out) == 1 && during != nil {
			during()
		}
		require.True(c.t, lines.Scan(), "line %d of %s: %v", len(out)+1, path, lines.Err())
		out = append(out, bytes.Clone(lines.Bytes()))
	}
	c.validate(ctx, in, resp, append(bytes.Join(out, []byte("\n")), '\n'))
	return out
}

func (c *specClient) validate(ctx context.Context, in *openapi3filter.RequestValidationInput, resp *http.Response, body []byte) {
	c.t.Helper()
	err := openapi3filter.ValidateResponse(ctx, &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header, Body: io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	})
	require.NoError(c.t, err, "openapi.yaml describes the answer to %s %s: %s", in.Request.Method, in.Request.URL, body)
	if resp.StatusCode < 300 {
		c.covered[in.Route.Method+" "+in.Route.Path] = true
	}
}

// ndjsonLines decodes an NDJSON body for the validator: each line is
// checked against the schema here, and the last is returned for the
// validator to check again.
func ndjsonLines(body io.Reader, _ http.Header, schema *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	lines := bufio.NewScanner(body)
	var last any
	for lines.Scan() {
		var v any
		if err := json.Unmarshal(lines.Bytes(), &v); err != nil {
			return nil, err
		}
		if err := schema.Value.VisitJSON(v); err != nil {
			return nil, fmt.Errorf("line %s: %w", lines.Text(), err)
		}
		last = v
	}
	return last, lines.Err()
}

// waitFor polls path until its body holds want.
func (c *specClient) waitFor(path, want string) {
	c.t.Helper()
	require.Eventually(c.t, func() bool {
		resp, err := c.http.Get("http://plugvisor" + path)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), want)
	}, time.Minute, 20*time.Millisecond, "%s shows %s", path, want)
}

// TestEveryRouteAnswersAsDescribed drives every operation of openapi.yaml
// against a real agent, with the reference CSI plugin and the reference
// Docker volume plugin: each request and each answer, successes and
// refusals, must be what the description says.
func TestEveryRouteAnswersAsDescribed(t *testing.T) {
	openapi3filter.RegisterBodyDecoder("application/x-ndjson", ndjsonLines)
	t.Cleanup(func() { openapi3filter.UnregisterBodyDecoder("application/x-ndjson") })
	doc := loadSpec(t)
	// Short, for the sockets below; cleaned up after the agent's shutdown,
	// mounts that a failed run left included.
	dir := hostpathtest.TempDir(t)
	a, err := agent.Start(agent.Config{DataDir: dir, Logger: probe.Logger(t), NodeID: "n1",
		FingerprintInterval: 50 * time.Millisecond, ResyncInterval: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Shutdown(context.Background())) })
	hp := hostpathtest.Serve(t, hostpath.Config{Name: "hp", NodeID: "n1", Root: filepath.Join(dir, "hp"),
		Mode: hostpath.ModeMonolith, SymlinkFallback: true})
	local, err := localvolume.New(filepath.Join(dir, "vols"), hclog.NewNullLogger())
	require.NoError(t, err)
	ctx, stopLocal := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- localvolume.Serve(ctx, local, filepath.Join(a.PluginDir(), "local.sock")) }()
	t.Cleanup(func() { stopLocal(); require.NoError(t, <-served) })
	c := newSpecClient(t, doc, a.SocketPath())

	c.do("GET", "/v1/health", "", 200)
	c.do("GET", "/v1/openapi.yaml", "", 200)
	c.do("GET", "/metrics", "", 200)

	// Plugins.
	for _, ptype := range []string{"csi-controller", "csi-node"} {
		c.do("POST", "/v1/plugins", `{"type":"`+ptype+`","name":"hp","alloc_id":"a1","connection":{"socket_path":"`+hp.Endpoint+`"}}`, 200)
	}
	c.refuse("POST", "/v1/plugins", `{"type":"csi-node","name":"hp","alloc_id":"a1","connection":{"socket_path":"/x.sock"},"colour":1}`)
	c.do("GET", "/v1/plugins", "", 200)
	c.do("GET", "/v1/plugins?type=csi-node", "", 200)
	c.do("GET", "/v1/plugins?colour=red", "", 400)
	c.do("GET", "/v1/plugins/csi-node/hp", "", 200)
	c.do("GET", "/v1/plugins/csi-node/nope", "", 404)
	c.waitFor("/v1/csi/instances", `"node_id": "n1"`)
	c.do("GET", "/v1/csi/instances", "", 200)
	c.waitFor("/v1/csi/plugins", `"type": "monolith"`)
	c.do("GET", "/v1/csi/plugins", "", 200)
	c.waitFor("/v1/csi/plugins/hp", `"nodes_healthy": 1`) // the catalog hears of fingerprints after the manager
	require.Contains(t, string(c.do("GET", "/v1/csi/plugins/hp", "", 200)), `"scope": "node"`)
	c.do("GET", "/v1/csi/plugins/nope", "", 404)
	c.do("PUT", "/v1/csi/plugins/hp/expect", `{"nodes":-1}`, 400)
	require.Contains(t, string(c.do("PUT", "/v1/csi/plugins/hp/expect", `{"nodes":2,"controllers":1}`, 200)), `"scope": "node"`)
	require.Contains(t, string(c.do("GET", "/v1/csi/plugins/hp", "", 200)), `"nodes_expected": 2`)
	c.do("GET", "/v1/csi/plugins/hp/capacity?capability=access%3Dsingle-node-writer&parameter=k%3Dv&topology=topology.hostpath.csi.plugvisor.io%2Fnode%3Dn1", "", 200)
	require.Contains(t, string(c.do("GET", "/v1/csi/plugins/hp/capacity?capability=single-node-writer/file-system", "", 400)),
		"capability=access=single-node-writer,attachment=file-system", "the older form is refused naming the new one")
	c.do("GET", "/v1/csi/plugins/hp/capacity?topology=a%3D1&topology=b%3D2", "", 400)
	c.do("GET", "/v1/csi/plugins/hp/capacity?capability=everyone", "", 400)
	c.refuse("GET", "/v1/events?replay=maybe", "")
	c.stream("/v1/events?replay=true", 3, func() {
		c.do("POST", "/v1/plugins", `{"type":"csi-test","name":"x","alloc_id":"a1","connection":{"socket_path":"/run/x.sock"}}`, 200)
	})
	c.do("DELETE", "/v1/plugins/csi-test/x/a1", "", 200)

	// CSI volumes, created through the controller.
	c.do("POST", "/v1/volumes/default/vol-1/create", `{"plugin_id":"hp","access_mode":"single-node-writer","capacity":{"required_bytes":1048576}}`, 201)
	c.refuse("POST", "/v1/volumes/default/vol-1/create", `{"plugin_id":"hp","access_mode":"sometimes"}`)
	c.do("GET", "/v1/volumes", "", 200)
	c.do("GET", "/v1/volumes?namespace=default", "", 200)
	c.do("GET", "/v1/volumes/default/vol-1", "", 200)
	c.do("GET", "/v1/volumes/default/nope", "", 404)
	c.do("POST", "/v1/volumes/default/vol-1/expand", `{"required_bytes":2097152}`, 200)
	c.do("POST", "/v1/volumes/default/vol-1/modify", `{"mutable_parameters":{"tier":"fast"}}`, 200)
	c.do("POST", "/v1/volumes/default/vol-1/modify", `{"mutable_parameters":{"iops":"5000"}}`, 400)
	c.do("POST", "/v1/volumes/default/vol-1/modify", `{"mutable_parameters":{}}`, 400)
	require.Contains(t, string(c.do("POST", "/v1/volumes/default/vol-1/modify", `{"mutable_parameters":{"tier\u0007":"x"}}`, 400)), "mutable_parameters key")
	require.Contains(t, string(c.do("GET", "/v1/volumes/default/vol-1", "", 200)), `"tier": "fast"`, "the catalog recorded the modify the plugin took")
	c.do("POST", "/v1/volumes/default/vol-1/claim", `{"alloc_id":"c1","read_only":true}`, 200)
	c.do("POST", "/v1/volumes/default/vol-1/release", `{"alloc_id":"c1"}`, 200)
	c.do("POST", "/v1/volumes/default/vol-1/mount", `{"alloc_id":"web-1"}`, 200)
	c.refuse("POST", "/v1/volumes/default/vol-1/mount", `{"alloc_id":"web-1","ro":true}`)
	c.do("POST", "/v1/volumes/default/vol-1/mount", `{"alloc_id":"web-2","force":true}`, 400) // force is an unmount's
	c.do("GET", "/v1/volumes/default/vol-1/status", "", 200)
	c.do("POST", "/v1/volumes/default/vol-1/mount", `{"alloc_id":"web-3","read_only":true}`, 200)
	c.do("POST", "/v1/volumes/default/vol-1/unmount", `{"alloc_id":"web-3","force":true}`, 200)
	c.do("POST", "/v1/volumes/default/vol-1/unmount", `{"alloc_id":"web-1"}`, 200)
	c.do("POST", "/v1/volumes/default/vol-1/detach", `{"node_id":"n1"}`, 200)
	c.do("GET", "/v1/volumes/default/vol-1/status", "", 200) // the node holds nothing of it now
	var snap api.SnapshotJSON
	require.NoError(t, json.Unmarshal(c.do("POST", "/v1/snapshots", `{"volume_id":"vol-1","name":"s1"}`, 201), &snap))
	c.do("GET", "/v1/snapshots?plugin_id=hp", "", 200)
	c.do("DELETE", "/v1/snapshots/hp/"+snap.SnapshotID, "", 200)
	c.refuse("DELETE", "/v1/volumes/default/vol-1?deregister_only=perhaps", "")
	c.do("DELETE", "/v1/volumes/default/vol-1", "", 200)

	// A CSI volume registered by hand, then forgotten.
	c.do("POST", "/v1/volumes", `{"id":"vol-2","plugin_id":"hp","access_mode":"single-node-writer","attachment_mode":"file-system"}`, 200)
	c.do("DELETE", "/v1/volumes/default/vol-2?deregister_only=true", "", 200)
	c.do("POST", "/v1/volumes:batch", `{"volumes":[{"id":"vol-3","plugin_id":"hp","access_mode":"single-node-writer","attachment_mode":"file-system"},`+
		`{"id":"vol-4","plugin_id":"hp","capabilities":[{"access_mode":"single-node-writer","attachment_mode":"file-system"}]}]}`, 200)
	c.do("POST", "/v1/volumes:deregister", `{"volume_ids":["vol-3","vol-4"]}`, 200)

	// Docker volumes, on the Docker plugin that discovery found.
	c.waitFor("/v1/docker/plugins", `"healthy": true`)
	c.do("GET", "/v1/discovery/plugins", "", 200)
	c.do("GET", "/v1/docker/plugins", "", 200)
	c.do("POST", "/v1/docker/volumes", `{"name":"data","driver":"local"}`, 200)
	c.do("GET", "/v1/docker/volumes", "", 200)
	c.do("GET", "/v1/docker/volumes/data", "", 200)
	c.do("POST", "/v1/docker/volumes/data/mount", `{"id":"c1"}`, 200)
	c.do("GET", "/v1/docker/volumes/data/path", "", 200)
	c.do("POST", "/v1/docker/volumes/data/unmount", `{"id":"c1"}`, 200)
	c.do("DELETE", "/v1/docker/volumes/data", "", 200)
	c.do("POST", "/v1/docker/volumes", `{}`, 200) // anonymous, on local
	c.do("DELETE", "/v1/docker/volumes/data?force=true", "", 200)
	c.refuse("DELETE", "/v1/docker/volumes/data?force=perhaps", "")

	c.do("DELETE", "/v1/plugins/csi-node/hp/a1", "", 409) // healthy, current and serving
	c.refuse("DELETE", "/v1/plugins/csi-node/hp/a1?force=perhaps", "")
	c.do("DELETE", "/v1/plugins/csi-node/hp/a1?force=true", "", 200)
	for op := range operations(doc) {
		require.True(t, c.covered[op] || isFleetOp(op), "%s was driven to a success", op)
	}
}

// isFleetOp says whether op is one of the fleet's, which only a cluster
// agent serves (TestTheFleetRoutesAnswerAsDescribed).
func isFleetOp(op string) bool {
	return strings.Contains(op, " /v1/fleet/")
}

// TestTheVolumeSchemaTakesAFleetsAttachments validates a volume with the
// attachments a fleet records against the spec's Volume schema, and one
// with a state no fleet writes.
func TestTheVolumeSchemaTakesAFleetsAttachments(t *testing.T) {
	schema := loadSpec(t).Components.Schemas["Volume"].Value
	check := func(state string) error {
		b, err := json.Marshal(api.VolumeJSON{ID: "db", Namespace: "default", PluginID: "hp", AccessMode: "single-node-writer",
			AttachmentMode: "file-system", Topologies: []map[string]string{}, ReadClaims: []string{}, WriteClaims: []string{},
			Attachments: []api.AttachmentJSON{{NodeID: "n1", ExternalNodeID: "csi-n1", State: state}}})
		require.NoError(t, err)
		var doc any
		require.NoError(t, json.Unmarshal(b, &doc))
		return schema.VisitJSON(doc)
	}
	require.NoError(t, check("attached"))
	require.Error(t, check("detached"), "the schema lists the states")
}
