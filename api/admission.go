package api

import (
	"context"
	"net/http"

	"github.com/plugvisor/plugvisor/errclass"
)

// Authenticated says whether r carries what l needs before any route is
// served: a valid token of l's set (read rights or more), or nothing
// when l has no tokens. The agent uses it to tell a client that has
// proved itself from one that has not, before the guard answers.
func (l Listener) Authenticated(r *http.Request) bool {
	if l.Tokens == nil {
		return true
	}
	token, ok := bearer(r)
	return ok && l.Tokens.Rights(token) != NoRights
}

// ErrStreamLimit: a listener serves as many event streams as it may (the
// agent's -http-max-streams). It answers 429.
var ErrStreamLimit = errclass.New(errclass.Limit, "too many event streams")

// OpenStream takes one of a listener's event stream slots, or refuses
// with an error that matches ErrStreamLimit; release gives the slot back.
type OpenStream func() (release func(), err error)

type openStreamKey struct{}

// WithStreamLimit returns ctx carrying open, which every event stream of
// a request made under ctx takes a slot from first: the agent puts it in
// each connection's context, one per listener.
func WithStreamLimit(ctx context.Context, open OpenStream) context.Context {
	return context.WithValue(ctx, openStreamKey{}, open)
}
