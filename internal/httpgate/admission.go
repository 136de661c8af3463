package httpgate

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"time"
)

// Handler admits each request of a gate's connections that proves
// itself, before next (the listener's guarded routes) serves it:
//   - a request without what the listener needs to authenticate is served
//     (the guard refuses it) and its connection closed after the answer;
//   - an authenticated request without a body is admitted at once;
//   - one with a body is admitted when all of it has arrived, and the
//     body must keep up minRate bytes a second after a grace: its n-th
//     byte is due grace + n/minRate after the handler starts, and all of
//     it within the read timeout. Once it has arrived, the connection's
//     read deadline is cleared: the server's read deadline cancels the
//     request's context when it passes, and the handler may wait long on
//     what the request asked for. (Serve with http.Server.ReadTimeout
//     zero, for the same reason.)
func (g *Listener) Handler(authenticated func(*http.Request) bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := r.Context().Value(gateConnKey{}).(*gateConn)
		switch {
		case c == nil:
		case !authenticated(r):
			w.Header().Set("Connection", "close")
		case r.Body == nil || r.Body == http.NoBody:
			g.admit(c)
		default:
			r.Body = newPacedBody(r.Body, r.ContentLength, http.NewResponseController(w), g.cfg, func() { g.admit(c) })
		}
		next.ServeHTTP(w, r)
	})
}

// pacedBody is a request body that must arrive at a minimum rate.
type pacedBody struct {
	io.ReadCloser
	rc          *http.ResponseController
	start, last time.Time // the handler's start; the whole request's deadline
	grace       time.Duration
	rate        int
	read        int64
	want        int64 // the Content-Length, or -1
	done        func()
	once        sync.Once
}

// newPacedBody paces body, of length want (-1: unknown), and calls done
// once all of it is read.
func newPacedBody(body io.ReadCloser, want int64, rc *http.ResponseController, cfg Config, done func()) *pacedBody {
	now := time.Now()
	b := &pacedBody{ReadCloser: body, rc: rc, start: now, last: now.Add(cfg.ReadTimeout),
		grace: cfg.HeaderTimeout, rate: cfg.MinBodyRate, want: want, done: done}
	_ = rc.SetReadDeadline(b.due())
	return b
}

// due is when the next byte must have arrived.
func (b *pacedBody) due() time.Time {
	d := b.start.Add(b.grace + time.Duration(float64(b.read)/float64(b.rate)*float64(time.Second)))
	if d.After(b.last) {
		return b.last
	}
	return d
}

func (b *pacedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.read += int64(n)
	switch {
	case errors.Is(err, io.EOF), err == nil && b.want >= 0 && b.read >= b.want:
		b.finish()
	case err == nil:
		_ = b.rc.SetReadDeadline(b.due())
	}
	return n, err
}

// finish admits the request once its body is in, and clears the
// connection's read deadline: from here on the server reads only to see
// the client hang up, and a deadline passing would cancel the request.
func (b *pacedBody) finish() {
	b.once.Do(func() {
		_ = b.rc.SetReadDeadline(time.Time{})
		b.done()
	})
}
