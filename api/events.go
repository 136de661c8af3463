package api

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
)

// Event is one line of the NDJSON event stream.
type Event struct {
	// Kind is "registered", "updated" or "deregistered".
	Kind     string          `json:"kind"`
	Sequence uint64          `json:"sequence"`
	Replayed bool            `json:"replayed,omitempty"`
	Event    json.RawMessage `json:"event"`
}

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
// (as "registered" lines with replayed set).
func (s *Server) events(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	ptype := q.Get("type")
	replay := false
	if v := q.Get("replay"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return errBadQuery("replay", v)
		}
		replay = b
	}
	sub, err := s.Registry.Subscribe(r.Context(), ptype, registry.SubscribeOptions{Replay: replay})
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush()
	}
	enc := json.NewEncoder(w)
	for ev := range sub.C {
		line := Event{Kind: KindOf(ev), Sequence: ev.GetSequence(), Event: protoJSON(ev)}
		line.Replayed = replay && ev.GetSequence() <= sub.Sequence
		if err := enc.Encode(line); err != nil {
			return nil // the client went away
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
	return nil
}
