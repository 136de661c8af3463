package discovery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/names"
)

// Media types of the Docker plugin protocol.
const (
	// MediaTypeV11 is what plugins built with go-plugins-helpers answer with.
	MediaTypeV11 = "application/vnd.docker.plugins.v1.1+json"
	// MediaTypeV12 is what the Docker engine sends, in Accept and here in
	// Content-Type too.
	MediaTypeV12 = "application/vnd.docker.plugins.v1.2+json"
)

// DefaultActivateTimeout bounds an activation handshake when
// ActivateOptions.Timeout is zero.
const DefaultActivateTimeout = 10 * time.Second

// activateMethod is the handshake every Docker plugin answers.
const activateMethod = "Plugin.Activate"

// localHost is the Host header of calls over unix sockets, as Docker sends it.
const localHost = "plugin.moby.localhost"

// maxResponseSize bounds a plugin's response body.
const maxResponseSize = 16 << 20

// Plugin types that Docker plugin interfaces map to (see TypesFor).
const (
	TypeDockerVolume  = "docker-volume"
	TypeDockerNetwork = "docker-network"
	TypeDockerIPAM    = "docker-ipam"
	TypeDockerAuthz   = "docker-authz"
	TypeDockerLog     = "docker-log"
	TypeDockerMetrics = "docker-metrics"
)

// dockerTypes maps the interfaces in a Docker manifest to plugin types.
var dockerTypes = map[string]string{
	"VolumeDriver":     TypeDockerVolume,
	"NetworkDriver":    TypeDockerNetwork,
	"IpamDriver":       TypeDockerIPAM,
	"authz":            TypeDockerAuthz,
	"LogDriver":        TypeDockerLog,
	"MetricsCollector": TypeDockerMetrics,
}

// Sentinel errors of Activate and Call, each carried by a *CallError.
var (
	// ErrInvalidCall: the candidate has no usable address, or the method
	// name or the request cannot be sent.
	ErrInvalidCall = errclass.New(errclass.Invalid, "invalid plugin call")
	// ErrUnreachable: no connection to the plugin, or it broke before an
	// answer (refused, no such socket, TLS handshake failed).
	ErrUnreachable = errclass.New(errclass.Unavailable, "plugin unreachable")
	// ErrTimeout: the plugin did not answer before the deadline (also
	// matches context.DeadlineExceeded).
	ErrTimeout = errclass.New(errclass.Deadline, "plugin did not answer in time")
	// ErrCanceled: the caller's context was canceled (also matches
	// context.Canceled).
	ErrCanceled = errclass.New(errclass.Unavailable, "plugin call canceled")
	// ErrBadResponse: the plugin answered something that is not a Docker
	// plugin response: invalid JSON, a wrong content type, a manifest
	// without Implements.
	ErrBadResponse = errclass.New(errclass.Upstream, "bad response from plugin")
	// ErrNotAPlugin: the endpoint answered 404 to Plugin.Activate.
	ErrNotAPlugin = errclass.New(errclass.Upstream, "not a Docker plugin")
	// ErrNotImplemented: the plugin answered 404 to a method.
	ErrNotImplemented = errclass.New(errclass.Upstream, "plugin does not implement the method")
	// ErrPluginFailed: the plugin answered with an error, an HTTP status
	// other than 200 or a non-empty "Err" field; CallError.Message holds its text.
	ErrPluginFailed = errclass.New(errclass.Upstream, "plugin returned an error")
)

// CallError reports a failed call to a plugin.
type CallError struct {
	Plugin     string // the plugin name
	Method     string // the method called, e.g. "Plugin.Activate"
	Kind       error  // one of the sentinels above
	StatusCode int    // the HTTP status, when the plugin answered
	Message    string // the plugin's own error text ({"Err": "..."} or the body), when it sent one
	Err        error  // the underlying cause, if any
}

// Error returns e.g. `discovery: plugin returned an error: plugin "x", VolumeDriver.Create: no space (HTTP 500)`.
func (e *CallError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: plugin %q, %s", e.Kind, e.Plugin, e.Method)
	switch {
	case e.Message != "":
		b.WriteString(": " + e.Message)
	case e.Err != nil:
		b.WriteString(": " + detail(e.Err, e.Kind).Error())
	}
	if e.StatusCode != 0 && e.StatusCode != http.StatusOK {
		fmt.Fprintf(&b, " (HTTP %d)", e.StatusCode)
	}
	return b.String()
}

// Unwrap returns Kind and Err.
func (e *CallError) Unwrap() []error { return []error{e.Kind, e.Err} }

// Manifest is a plugin's answer to the activation handshake.
type Manifest struct {
	// Implements lists the Docker interfaces the plugin implements, such as
	// "VolumeDriver".
	Implements []string
}

// TypesFor returns the plugvisor plugin types of the interfaces m lists, in
// order and without repeats: "VolumeDriver" gives "docker-volume",
// "NetworkDriver" "docker-network", "IpamDriver" "docker-ipam", "authz"
// "docker-authz", "LogDriver" "docker-log", "MetricsCollector"
// "docker-metrics". An interface it does not know is kept as it is.
func TypesFor(m Manifest) []string {
	out := make([]string, 0, len(m.Implements))
	seen := map[string]bool{}
	for _, iface := range m.Implements {
		t, ok := dockerTypes[iface]
		if !ok {
			t = iface
		}
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out
}

// ActivateOptions tune Activate.
type ActivateOptions struct {
	// Timeout bounds the handshake; zero means DefaultActivateTimeout. A
	// deadline on the context applies too: the earlier one wins.
	Timeout time.Duration
}

// Activate performs the Docker activation handshake with c: one POST to
// /Plugin.Activate, over c's unix socket or over TCP (with TLS when c.TLS is
// set), answered by a manifest {"Implements": [...]}. It makes one attempt:
// unlike Docker it does not retry, which is left to the caller.
//
// Errors are *CallError values: ErrTimeout when the plugin does not answer in
// time, ErrUnreachable when it cannot be reached, ErrNotAPlugin for a 404,
// ErrPluginFailed for another error status, ErrBadResponse for a body that is
// not a manifest or a content type that is not JSON.
func Activate(ctx context.Context, c Candidate, opts ActivateOptions) (Manifest, error) {
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultActivateTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body, err := call(ctx, c, activateMethod, nil, ErrNotAPlugin)
	if err != nil {
		return Manifest{}, err
	}
	m, err := decodeManifest(body)
	if err != nil {
		return Manifest{}, c.callError(activateMethod, ErrBadResponse, http.StatusOK, err)
	}
	return m, nil
}

// decodeManifest decodes the body of a 200 answer to Plugin.Activate: a JSON
// object with an Implements list (which may be empty, never missing).
func decodeManifest(body []byte) (Manifest, error) {
	var m struct{ Implements *[]string }
	if err := json.Unmarshal(body, &m); err != nil {
		return Manifest{}, fmt.Errorf("invalid manifest: %w", err)
	}
	if m.Implements == nil {
		return Manifest{}, errors.New("manifest has no Implements list")
	}
	return Manifest{Implements: *m.Implements}, nil
}

// Call makes one Docker-protocol call to c: a POST to /<method> with req
// encoded as JSON (no body when req is nil), whose JSON answer is decoded into
// resp (unless resp is nil). An answer other than 200, or a 200 answer whose
// "Err" field is not empty, is the plugin's error: a *CallError matching
// ErrPluginFailed (ErrNotImplemented for a 404) whose Message is the plugin's
// text. The context bounds the call: Call has no timeout of its own. Other
// errors are as for Activate.
func Call(ctx context.Context, c Candidate, method string, req, resp any) error {
	body, err := call(ctx, c, method, req, ErrNotImplemented)
	if err != nil || resp == nil {
		return err
	}
	if err := json.Unmarshal(body, resp); err != nil {
		return c.callError(method, ErrBadResponse, http.StatusOK, fmt.Errorf("invalid JSON: %w", err))
	}
	return nil
}

// call posts req to /method and returns the body of a 200 answer. notFound is
// the sentinel for a 404.
func call(ctx context.Context, c Candidate, method string, req any, notFound error) ([]byte, error) {
	if method == "" || strings.ContainsAny(method, "/?#% ") || !utf8.ValidString(method) {
		return nil, c.callError(method, ErrInvalidCall, 0, errors.New("bad method name"))
	}
	client, base, err := c.httpClient()
	if err != nil {
		kind := sentinelOf(err, ErrInvalidCall, ErrTLSConfig, ErrSocketPathTooLong)
		return nil, c.callError(method, kind, 0, err)
	}
	defer client.CloseIdleConnections()

	var body io.Reader = http.NoBody
	if req != nil {
		b, err := json.Marshal(req)
		if err != nil {
			return nil, c.callError(method, ErrInvalidCall, 0, fmt.Errorf("encode request: %w", err))
		}
		body = bytes.NewReader(b)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/"+method, body)
	if err != nil {
		return nil, c.callError(method, ErrInvalidCall, 0, err)
	}
	hreq.Header.Set("Accept", MediaTypeV12)
	if req != nil {
		hreq.Header.Set("Content-Type", MediaTypeV12)
	}
	hresp, err := client.Do(hreq)
	if err != nil {
		return nil, c.transportError(ctx, method, err)
	}
	defer hresp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(hresp.Body, maxResponseSize+1))
	if err != nil {
		return nil, c.transportError(ctx, method, err)
	}
	status := hresp.StatusCode
	if len(data) > maxResponseSize {
		return nil, c.callError(method, ErrBadResponse, status, fmt.Errorf("response larger than %d bytes", maxResponseSize))
	}
	switch {
	case status == http.StatusNotFound:
		return nil, c.pluginError(method, notFound, status, errorText(data, status))
	case status != http.StatusOK:
		return nil, c.pluginError(method, ErrPluginFailed, status, errorText(data, status))
	}
	if err := checkMediaType(hresp.Header.Get("Content-Type")); err != nil {
		return nil, c.callError(method, ErrBadResponse, status, err)
	}
	var e struct{ Err string }
	if json.Unmarshal(data, &e) == nil && e.Err != "" {
		return nil, c.pluginError(method, ErrPluginFailed, status, names.Text(e.Err))
	}
	return data, nil
}

// httpClient returns a client for one call to c, and the base URL to post to.
// Connections are not kept alive: nothing is left open after the call.
func (c Candidate) httpClient() (*http.Client, string, error) {
	tr := &http.Transport{DisableKeepAlives: true}
	client := &http.Client{
		Transport: tr,
		// A redirect is not a Docker plugin answer: report it as the status it is.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	var dialer net.Dialer
	switch {
	case c.SocketPath != "" && c.TCPAddr == "":
		if err := checkSocketPath(c.SocketPath); err != nil {
			return nil, "", err
		}
		tr.DisableCompression = true
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			conn, err := dialer.DialContext(ctx, "unix", c.SocketPath)
			if err != nil {
				return nil, err
			}
			return newRequestFirst(conn), nil
		}
		return client, "http://" + localHost, nil
	case c.TCPAddr != "" && c.SocketPath == "":
		tr.DialContext = dialer.DialContext
		if c.TLS == nil {
			return client, "http://" + c.TCPAddr, nil
		}
		cfg, err := c.TLS.ClientConfig()
		if err != nil {
			return nil, "", err
		}
		tr.TLSClientConfig = cfg
		return client, "https://" + c.TCPAddr, nil
	}
	return nil, "", errors.New("exactly one of SocketPath and TCPAddr must be set")
}

// callError returns a *CallError about a call to c.
func (c Candidate) callError(method string, kind error, status int, err error) *CallError {
	return &CallError{Plugin: c.Name, Method: method, Kind: kind, StatusCode: status, Err: err}
}

// pluginError returns a *CallError carrying the plugin's own error text.
func (c Candidate) pluginError(method string, kind error, status int, msg string) *CallError {
	return &CallError{Plugin: c.Name, Method: method, Kind: kind, StatusCode: status, Message: msg}
}

// transportError classifies a failure to get an answer from c.
func (c Candidate) transportError(ctx context.Context, method string, err error) *CallError {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	switch cerr := ctx.Err(); {
	case errors.Is(cerr, context.DeadlineExceeded):
		return c.callError(method, ErrTimeout, 0, cerr)
	case errors.Is(cerr, context.Canceled):
		return c.callError(method, ErrCanceled, 0, cerr)
	}
	return c.callError(method, ErrUnreachable, 0, err)
}

// requestFirst is a connection on which the client speaks first, as an
// HTTP/1.1 client does: reads wait until the request is written (or the
// connection is closed). net/http's transport reads a connection as soon as
// it is dialed, and bytes that arrive before its request is written are an
// "unsolicited response" it reports on the process's standard logger. The
// other protocol a plugin socket may speak is gRPC (a CSI plugin), whose
// server sends its HTTP/2 settings the moment a client connects: read after
// the request, those bytes are the answer they are, one that is not HTTP/1.1,
// and the handshake fails without a word on the standard logger.
type requestFirst struct {
	net.Conn
	written chan struct{}
	once    sync.Once
}

func newRequestFirst(conn net.Conn) *requestFirst {
	return &requestFirst{Conn: conn, written: make(chan struct{})}
}

// Write writes p, then lets reads through.
func (c *requestFirst) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.once.Do(func() { close(c.written) })
	return n, err
}

// Read reads once something was written, or the connection closed.
func (c *requestFirst) Read(p []byte) (int, error) {
	<-c.written
	return c.Conn.Read(p)
}

// Close closes the connection, and lets a waiting read return its error.
func (c *requestFirst) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { close(c.written) })
	return err
}

// errorText returns the plugin's error text from the body of an error
// answer: the "Err" field of a JSON object, else the body itself, else the
// status text.
func errorText(body []byte, status int) string {
	var e struct{ Err string }
	if json.Unmarshal(body, &e) == nil && e.Err != "" {
		return names.Text(e.Err)
	}
	if s := strings.TrimSpace(string(body)); s != "" {
		return names.Text(s)
	}
	return http.StatusText(status)
}

// checkMediaType accepts the content types of a Docker plugin answer:
// application/vnd.docker.plugins.v1+json, v1.1, v1.2 (any v1.N), and
// application/json, with any parameters. An answer without a Content-Type is
// accepted, as Docker does; Docker checks no content type at all.
func checkMediaType(v string) error {
	if v == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(v)
	if err != nil {
		return fmt.Errorf("content type %q: %w", v, err)
	}
	if mt == "application/json" {
		return nil
	}
	if rest, ok := strings.CutPrefix(mt, "application/vnd.docker.plugins.v1"); ok {
		if minor, ok := strings.CutSuffix(rest, "+json"); ok && isMinorVersion(minor) {
			return nil
		}
	}
	return fmt.Errorf("content type %q is not a Docker plugin media type", v)
}

// isMinorVersion reports whether s is "" or "." followed by digits.
func isMinorVersion(s string) bool {
	if s == "" {
		return true
	}
	digits, ok := strings.CutPrefix(s, ".")
	if !ok || digits == "" {
		return false
	}
	return strings.Trim(digits, "0123456789") == ""
}
