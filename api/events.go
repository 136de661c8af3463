package api

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/plugvisor/plugvisor/csi/volumes"
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
	// Volume is the body of a volume event's line, whose kind is a
	// volumes.EventKind ("claim-lost", "condition-abnormal", ...) and
	// whose sequence is 0: volume events are not the registry's.
	Volume *VolumeEventJSON `json:"volume,omitempty"`
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
// last event that changed that plugin). Without ?type=, the volume
// manager's volume events come too (see VolumeEventJSON). A client that falls too
// far behind gets a last "lagged" line before the stream ends; a stream
// that ends without one ended because the agent shut down.
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
	var volumeEvents <-chan volumes.Event
	if s.VolumeEvents != nil && ptype == "" {
		var cancel func()
		volumeEvents, cancel = s.VolumeEvents.SubscribeVolumeEvents()
		defer cancel()
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	stream(w, sub, volumeEvents, replay)
	return nil
}

// VolumeEventFeed gives each event stream the volume manager's events
// (volumes.Config.OnEvent) from the moment it subscribes. A subscriber too
// slow to take them has its channel closed: its stream ends with a
// "lagged" line.
type VolumeEventFeed interface {
	SubscribeVolumeEvents() (events <-chan volumes.Event, cancel func())
}

// VolumeEventJSON is a volume event's line body: what became of an alloc's
// mount when this node's standing in its fleet changed, or how its volume's
// condition changed.
type VolumeEventJSON struct {
	Namespace  string `json:"namespace"`
	VolumeID   string `json:"volume_id"`
	AllocID    string `json:"alloc_id"`
	TargetPath string `json:"target_path"`
	ReadOnly   bool   `json:"read_only"`
	Detail     string `json:"detail"`
}

// volumeEventLine is the stream's line of ev.
func volumeEventLine(ev volumes.Event) Event {
	return Event{Kind: string(ev.Kind), Volume: &VolumeEventJSON{Namespace: ev.Namespace, VolumeID: ev.VolumeID, AllocID: ev.AllocID,
		TargetPath: ev.TargetPath, ReadOnly: ev.ReadOnly, Detail: ev.Detail}}
}

// stream writes sub's events, and events' (nil: none), to w, one line
// each, flushed, until sub ends or the client goes away; then, if sub
// ended for lag, or events was closed for it, the lagged line.
func stream(w http.ResponseWriter, sub *registry.Subscription, events <-chan volumes.Event, replay bool) {
	flusher, _ := w.(http.Flusher)
	flush := func() {
		if flusher != nil {
			flusher.Flush()
		}
	}
	flush()
	enc := json.NewEncoder(w)
	var last uint64
	for {
		var line Event
		select {
		case ev, ok := <-sub.C:
			if !ok {
				if err := sub.Err(); errors.Is(err, registry.ErrLagged) {
					_ = enc.Encode(Event{Kind: KindLagged, Sequence: max(last, sub.Sequence), Error: err.Error()})
					flush()
				}
				return
			}
			live := ev.GetSequence() > sub.Sequence
			line = Event{Kind: KindOf(ev), Sequence: ev.GetSequence(), Event: protoJSON(ev), Replayed: replay && !live}
			if live {
				last = ev.GetSequence()
			}
		case ev, ok := <-events:
			if !ok {
				_ = enc.Encode(Event{Kind: KindLagged, Sequence: max(last, sub.Sequence), Error: "the stream fell too far behind the volume events"})
				flush()
				return
			}
			line = volumeEventLine(ev)
		}
		if err := enc.Encode(line); err != nil {
			return // the client went away
		}
		flush()
	}
}
