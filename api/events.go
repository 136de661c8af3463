package api

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
)

// Event is one line of the NDJSON event stream.
type Event struct {
	// Kind is "registered", "updated" or "deregistered"; or "lagged" on
	// the last line of a stream cut because the client fell too far
	// behind, with the sequence of the last event it was sent and the
	// reason in Error (reconnect with ?replay=true to resynchronise).
	Kind     string          `json:"kind"`
	Sequence uint64          `json:"sequence"`
	Replayed bool            `json:"replayed"`
	Event    json.RawMessage `json:"event,omitempty"`
	Error    string          `json:"error,omitempty"`
}

// KindLagged is the kind of the last line of a stream cut for lag.
const KindLagged = "lagged"

// KindOf names a registry event for the stream.
func KindOf(ev registry.Event) string {
	switch ev.(type) {
	case *messages.PluginRegistered:
		return "registered"
	case *messages.PluginUpdated:
		return "updated"
	case *messages.PluginDeregistered:
		return "deregistered"
	}
	return "unknown"
}

// events streams registry events as NDJSON until the client disconnects:
// ?type= filters by plugin type, ?replay=true sends the current state first
// (as "registered" lines with replayed set, each with the sequence of the
// last event that changed that plugin). A client that falls too far behind
// gets a last "lagged" line before the stream ends; a stream that ends
// without one ended because the agent shut down.
func (s *Server) events(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	ptype := q.Get("type")
	replay, err := queryBool(q, "replay")
	if err != nil {
		return err
	}
	sub, err := s.Registry.Subscribe(r.Context(), ptype, registry.SubscribeOptions{Replay: replay})
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	stream(w, sub, replay)
	return nil
}

// stream writes sub's events to w, one line each, flushed, until sub ends
// or the client goes away; then, if sub ended for lag, the lagged line.
func stream(w http.ResponseWriter, sub *registry.Subscription, replay bool) {
	flusher, _ := w.(http.Flusher)
	flush := func() {
		if flusher != nil {
			flusher.Flush()
		}
	}
	flush()
	enc := json.NewEncoder(w)
	var last uint64
	for ev := range sub.C {
		live := ev.GetSequence() > sub.Sequence
		line := Event{Kind: KindOf(ev), Sequence: ev.GetSequence(), Event: protoJSON(ev), Replayed: replay && !live}
		if err := enc.Encode(line); err != nil {
			return // the client went away
		}
		flush()
		if live {
			last = ev.GetSequence()
		}
	}
	if err := sub.Err(); errors.Is(err, registry.ErrLagged) {
		_ = enc.Encode(Event{Kind: KindLagged, Sequence: max(last, sub.Sequence), Error: err.Error()})
		flush()
	}
}
