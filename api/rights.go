package api

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/plugvisor/plugvisor/names"
)

// routeRights is the right each route needs from a token, by its pattern
// ("METHOD /path", as routes names it). openapi.yaml gives the same right
// as each operation's x-right, and a test checks every right against every
// route of the spec. Choosing the socket that serves a plugin needs
// Plugins: that socket receives the secrets and data of every volume of
// the plugin, so Volumes alone does not allow it.
var routeRights = map[string]Rights{
	"GET /metrics":                                   Read,
	"GET /v1/health":                                 Read,
	"GET /v1/openapi.yaml":                           Read,
	"GET /v1/plugins":                                Read,
	"GET /v1/plugins/{type}/{name}":                  Read,
	"GET /v1/events":                                 Read,
	"GET /v1/csi/plugins":                            Read,
	"GET /v1/csi/instances":                          Read,
	"GET /v1/csi/plugins/{name}/capacity":            Read,
	"GET /v1/csi/plugins/{name}":                     Read,
	"GET /v1/volumes":                                Read,
	"GET /v1/volumes/{namespace}/{id}":               Read,
	"GET /v1/volumes/{namespace}/{id}/status":        Read,
	"GET /v1/snapshots":                              Read,
	"GET /v1/docker/volumes":                         Read,
	"GET /v1/docker/volumes/{name}":                  Read,
	"GET /v1/docker/volumes/{name}/path":             Read,
	"GET /v1/docker/plugins":                         Read,
	"GET /v1/discovery/plugins":                      Read,
	"GET /v1/fleet/nodes":                            Read,
	"POST /v1/plugins":                               Plugins,
	"DELETE /v1/plugins/{type}/{name}/{alloc}":       Plugins,
	"PUT /v1/csi/plugins/{name}/expect":              Plugins,
	"POST /v1/volumes":                               Volumes,
	"POST /v1/volumes:batch":                         Volumes,
	"POST /v1/volumes:deregister":                    Volumes,
	"DELETE /v1/volumes/{namespace}/{id}":            Volumes,
	"POST /v1/volumes/{namespace}/{id}/claim":        Volumes,
	"POST /v1/volumes/{namespace}/{id}/release":      Volumes,
	"POST /v1/volumes/{namespace}/{id}/mount":        Volumes,
	"POST /v1/volumes/{namespace}/{id}/unmount":      Volumes,
	"POST /v1/volumes/{namespace}/{id}/detach":       Volumes,
	"POST /v1/volumes/{namespace}/{id}/create":       Volumes,
	"POST /v1/volumes/{namespace}/{id}/expand":       Volumes,
	"POST /v1/volumes/{namespace}/{id}/modify":       Volumes,
	"POST /v1/snapshots":                             Volumes,
	"DELETE /v1/snapshots/{plugin_id}/{snapshot_id}": Volumes,
	"POST /v1/docker/volumes":                        Volumes,
	"DELETE /v1/docker/volumes/{name}":               Volumes,
	"POST /v1/docker/volumes/{name}/mount":           Volumes,
	"POST /v1/docker/volumes/{name}/unmount":         Volumes,
	"POST /v1/fleet/nodes/{node}/drain":              Admin,
	"POST /v1/fleet/nodes/{node}/eligible":           Admin,
	"POST /v1/fleet/nodes/{node}/free-claims":        Admin,
}

// rightFor is the right a request that the mux matched to pattern needs.
// A pattern without a method answers only 404 or 405: any valid token may
// hear that. A route missing from routeRights needs Admin, so that a route
// added without a right is closed, not open.
func rightFor(pattern string) Rights {
	if !strings.Contains(pattern, " ") {
		return Read
	}
	if need, ok := routeRights[pattern]; ok {
		return need
	}
	return Admin
}

// callerKey keys the name of the token a request carried in its context.
type callerKey struct{}

// withCaller records in r that it carries the token named name.
func withCaller(r *http.Request, name string) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), callerKey{}, "token:"+name))
}

// callerOf names who sent r, for logs and events, never by a secret:
// "token:<name>" for an ACL token, "cert:<CN>" for a TLS client
// certificate, "unix:uid=<uid>" on a unix socket served through
// PeerListener, "addr:<address>" otherwise.
func callerOf(r *http.Request) string {
	if name, ok := r.Context().Value(callerKey{}).(string); ok {
		return name
	}
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		cn := r.TLS.PeerCertificates[0].Subject.CommonName
		if !names.Valid(cn) {
			cn = strconv.QuoteToASCII(cn)
		}
		if len(cn) > names.MaxLen {
			cn = cn[:names.MaxLen]
		}
		return "cert:" + cn
	}
	if uid, ok := strings.CutPrefix(r.RemoteAddr, "uid="); ok {
		uid, _, _ = strings.Cut(uid, ",")
		return "unix:uid=" + uid
	}
	if r.RemoteAddr == "" || r.RemoteAddr == "@" {
		return "unix"
	}
	return "addr:" + r.RemoteAddr
}
