package api

import (
	"net/http"
	"time"
)

// StreamWriteTimeout bounds each write of a long-lived response (the event
// stream): a client that stops reading is cut off after it, instead of
// holding the connection forever.
const StreamWriteTimeout = 30 * time.Second

// streaming lifts the server's read and write timeouts, which bound a whole
// request, for a response that lasts as long as the client wants: the read
// deadline goes (the request has no body; a client that hangs up still
// ends it), and the write deadline moves forward by StreamWriteTimeout
// before each write and flush. A stream first takes a slot from the
// request's stream limit (WithStreamLimit), if it has one, and holds it
// to its end.
func streaming(h func(http.ResponseWriter, *http.Request) error) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		if open, ok := r.Context().Value(openStreamKey{}).(OpenStream); ok {
			release, err := open()
			if err != nil {
				return err
			}
			defer release()
		}
		rc := http.NewResponseController(w)
		// Both fail only on writers without deadlines (httptest's), where
		// there is nothing to lift.
		_ = rc.SetReadDeadline(time.Time{})
		_ = rc.SetWriteDeadline(time.Now().Add(StreamWriteTimeout))
		return h(&streamWriter{ResponseWriter: w, rc: rc}, r)
	}
}

// streamWriter moves the write deadline forward before each write.
type streamWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
}

func (s *streamWriter) Write(b []byte) (int, error) {
	_ = s.rc.SetWriteDeadline(time.Now().Add(StreamWriteTimeout))
	return s.ResponseWriter.Write(b)
}

func (s *streamWriter) Flush() {
	_ = s.rc.SetWriteDeadline(time.Now().Add(StreamWriteTimeout))
	_ = s.rc.Flush()
}

// Unwrap lets http.NewResponseController reach the connection's writer.
func (s *streamWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
