package volumes

import "sync"

// eventFeed hands the volume manager's events to its subscribers (the
// API's event streams). A subscriber whose buffer is full is dropped, its
// channel closed, so that no stream holds up the volume manager or the
// others.
type eventFeed struct {
	mu   sync.Mutex
	subs map[chan Event]bool
}

// eventFeedBuffer is how many fence events a stream may fall behind.
const eventFeedBuffer = 256

// subscribe gives the events from now on, until cancel.
func (f *eventFeed) subscribe() (<-chan Event, func()) {
	c := make(chan Event, eventFeedBuffer)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.subs == nil {
		f.subs = map[chan Event]bool{}
	}
	f.subs[c] = true
	return c, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.subs, c)
	}
}

// publish hands ev to every subscriber, dropping those that are full.
func (f *eventFeed) publish(ev Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.subs {
		select {
		case c <- ev:
		default:
			close(c)
			delete(f.subs, c)
		}
	}
}

// SubscribeVolumeEvents gives what becomes of each mount (the events
// Config.OnEvent hears) from now on, until cancel. A subscriber that falls
// more than 256 events behind is dropped, its channel closed, so that none
// holds up the volume manager or the others.
func (m *Manager) SubscribeVolumeEvents() (events <-chan Event, cancel func()) {
	return m.feed.subscribe()
}
