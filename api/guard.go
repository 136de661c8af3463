package api

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"strings"
)

// Listener says who may use the API on one listener; HandlerFor turns it
// into a guarded handler.
type Listener struct {
	// Name says which listener this is in errors and logs, e.g. "unix
	// socket" or "tcp 127.0.0.1:4646".
	Name string
	// Hosts are the Host header values that name this listener, compared
	// without regard to case: "plugvisor" on the unix socket, "host:port"
	// on TCP.
	Hosts []string
	// Port, when set, also accepts as Host any IP literal with this port.
	// An IP literal cannot be rebound by DNS, so it names this listener.
	Port string
	// Tokens, when set, makes every request carry "Authorization: Bearer
	// <token>" with a token of the set whose rights include the right of
	// the request's route (routeRights). Without Tokens, every caller who
	// reaches the listener has every right.
	Tokens *Tokens
}

// HandlerFor returns the API's routes guarded for one listener. In order,
// a request is refused when:
//   - its Host header does not name the listener (421): a page that a
//     browser loaded from another name cannot reach the API by DNS
//     rebinding;
//   - the listener has tokens and the request has no valid one (401), or
//     one without the right its route needs (403, naming the right);
//   - it is a write (not GET or HEAD) without Content-Type
//     application/json (415): a browser cannot send that cross-origin
//     without a CORS preflight, which the API never grants.
//
// Bodies are limited to MaxBodyBytes. Refusals are logged at debug level
// with the method and path, never the token. A request served carries its
// caller's name (callerOf) for the handlers' logs and events.
func (s *Server) HandlerFor(l Listener) http.Handler {
	next := s.mux()
	hosts := make(map[string]bool, len(l.Hosts))
	for _, h := range l.Hosts {
		hosts[strings.ToLower(h)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pattern := next.Handler(r)
		r, status, err := l.refuse(r, hosts, rightFor(pattern))
		if err != nil {
			s.Logger.Debug("request refused", "listener", l.Name, "method", r.Method, "path", r.URL.Path,
				"status", status, "error", err)
			if status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="plugvisor"`)
			}
			writeJSON(w, status, map[string]string{"error": err.Error(), "code": errorCode(err, status)})
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		next.ServeHTTP(w, r)
	})
}

// refuse says why r may not be served on l, with the status to answer;
// need is the right r's route needs. It returns r with its caller's token
// name when r may be served.
func (l Listener) refuse(r *http.Request, hosts map[string]bool, need Rights) (*http.Request, int, error) {
	if !l.names(r, hosts) {
		return r, http.StatusMisdirectedRequest, fmt.Errorf("the Host header %q does not name this listener (%s); "+
			"send Host: %s", r.Host, l.Name, l.hostHint())
	}
	write := r.Method != http.MethodGet && r.Method != http.MethodHead
	if l.Tokens != nil {
		token, ok := bearer(r)
		if !ok {
			return r, http.StatusUnauthorized, fmt.Errorf("this listener (%s) needs an ACL token: "+
				"send Authorization: Bearer <token>, with a token from the agent's -token-file", l.Name)
		}
		switch name, rights := l.Tokens.Lookup(token); {
		case rights == NoRights:
			return r, http.StatusUnauthorized, fmt.Errorf("the ACL token is not valid on this listener (%s); "+
				"use a token from the agent's -token-file", l.Name)
		case !rights.Has(need):
			return r, http.StatusForbidden, fmt.Errorf("the ACL token %q has the rights %s; %s %s needs the %s right: "+
				"use a token whose rights include %s or admin", name, rights, r.Method, r.URL.Path, need, need)
		default:
			r = withCaller(r, name)
		}
	}
	if write {
		mediaType, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || mediaType != "application/json" {
			return r, http.StatusUnsupportedMediaType, fmt.Errorf("%s needs Content-Type: application/json, not %q",
				r.Method, r.Header.Get("Content-Type"))
		}
	}
	return r, 0, nil
}

// names says whether r's Host header names l.
func (l Listener) names(r *http.Request, hosts map[string]bool) bool {
	host := strings.ToLower(r.Host)
	if hosts[host] {
		return true
	}
	if l.Port == "" {
		return false
	}
	name, port, err := net.SplitHostPort(host)
	if err != nil {
		// No port: the scheme's default one.
		name, port = strings.Trim(host, "[]"), "80"
		if r.TLS != nil {
			port = "443"
		}
	}
	if port != l.Port {
		return false
	}
	return hosts[net.JoinHostPort(name, port)] || net.ParseIP(name) != nil
}

func (l Listener) hostHint() string {
	if len(l.Hosts) > 0 {
		return l.Hosts[0]
	}
	return "<an IP address of this host>:" + l.Port
}

// bearer is the token of r's "Authorization: Bearer <token>" header.
func bearer(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}
