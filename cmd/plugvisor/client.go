package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"

	"github.com/plugvisor/plugvisor/agent"
)

// client talks to an agent's API over its unix socket.
type client struct {
	dataDir, socket string
	http            *http.Client
	// progress, when set, is drawn while a request waits (see withProgress).
	progress func() *progress
}

// withProgress returns a copy of c that draws what on w while each request
// waits for its answer, when w is a terminal and not quiet.
func (c *client) withProgress(w io.Writer, quiet bool, what string) *client {
	cp := *c
	cp.progress = func() *progress { return startProgress(w, quiet, what) }
	return &cp
}

func newClient(dataDir string) *client {
	socket := agent.SocketPath(dataDir)
	return &client{
		dataDir: dataDir,
		socket:  socket,
		http: &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", socket)
			},
		}},
	}
}

// errNoAgent says the agent is not running, and how to start one.
type errNoAgent struct {
	dataDir, socket string
	err             error
}

// Code is the code of the error under -json.
func (e *errNoAgent) Code() string { return "no_agent" }

// Error names the socket once: of the dial's error it says only the
// system call's ("connect: no such file or directory").
func (e *errNoAgent) Error() string {
	cause := e.err
	if sys := (*os.SyscallError)(nil); errors.As(cause, &sys) {
		cause = sys
	}
	return fmt.Sprintf("no agent is running at %s (%v)\nstart one with: plugvisor agent -data-dir %s",
		e.socket, cause, e.dataDir)
}

// do sends a request with an optional JSON body and returns the response,
// turning an API error into a Go error with the agent's message. path is
// escaped already: its names went through url.PathEscape, and are sent as
// they are, not escaped a second time.
func (c *client) do(ctx context.Context, method, path string, query url.Values, body any) (*http.Response, error) {
	unescaped, err := url.PathUnescape(path)
	if err != nil {
		return nil, fmt.Errorf("request path %q: %w", path, err)
	}
	var reader io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		reader = bytes.NewReader(b)
	}
	if c.progress != nil {
		defer c.progress().end()
	}
	u := url.URL{Scheme: "http", Host: "plugvisor", Path: unescaped, RawPath: path, RawQuery: query.Encode()}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), reader)
	if err != nil {
		return nil, err
	}
	if method != http.MethodGet {
		// The API refuses writes without it, even bodiless ones.
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
			return nil, &errNoAgent{dataDir: c.dataDir, socket: c.socket, err: err}
		}
		return nil, err
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		var apiErr struct {
			Error string `json:"error"`
			Code  string `json:"code"`
		}
		if json.NewDecoder(resp.Body).Decode(&apiErr) != nil || apiErr.Error == "" {
			apiErr.Error = resp.Status
		}
		return nil, &apiError{status: resp.StatusCode, message: apiErr.Error, code: apiErr.Code}
	}
	return resp, nil
}

// apiError is an answer of the agent's API that says no: its status and
// message.
type apiError struct {
	status  int
	message string
	// code is the API's code of the error (its class, or
	// "outcome_unknown"); empty from an agent that sends none.
	code string
}

func (e *apiError) Error() string { return e.message }

// Code is the API's code of the error, or the status's name in snake case
// ("not_found", "conflict", ...): the code of the error under -json.
func (e *apiError) Code() string {
	if e.code != "" {
		return e.code
	}
	return strings.ToLower(strings.ReplaceAll(cmp.Or(http.StatusText(e.status), fmt.Sprintf("status %d", e.status)), " ", "_"))
}

// isStatus says whether err is an API answer with this status.
func isStatus(err error, status int) bool {
	var apiErr *apiError
	return errors.As(err, &apiErr) && apiErr.status == status
}

// call sends a request and decodes the JSON answer into out (unless nil).
func (c *client) call(ctx context.Context, method, path string, query url.Values, body, out any) error {
	resp, err := c.do(ctx, method, path, query, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
