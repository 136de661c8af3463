package registry

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/plugvisor/plugvisor/messages"
)

// TestACallThatTimedOutNeverHoldsUpTheActor: a facade call whose request
// timeout passed before its answer returns unanswered, and the actor's
// late answer neither blocks nor reaches anyone.
func TestACallThatTimedOutNeverHoldsUpTheActor(t *testing.T) {
	in := newInbox(time.Millisecond)
	w := newCall()
	in.put(w)
	if answered, _ := w.wait(); answered {
		t.Fatal("nobody answered, yet the call says it was answered")
	}
	a := &pluginsActor{metrics: noMetrics{}, in: in}
	for range 2 { // the second stands for an answer after the sweep's own
		replied := make(chan struct{})
		go func() { a.reply(nil, w, nil); close(replied) }()
		select {
		case <-replied:
		case <-time.After(10 * time.Second):
			t.Fatal("the actor's answer to a call that timed out blocked")
		}
	}
	if len(w.done) != 0 {
		t.Fatal("the actor's late answer reached the call's channel")
	}
}

// TestAnAnsweredCallReturnsItsAnswer: the answer, error or nil, is what
// the caller gets, and the sweep no longer holds the call nor runs once
// no call waits.
func TestAnAnsweredCallReturnsItsAnswer(t *testing.T) {
	for _, want := range []error{nil, errorf(ErrNotFound, "no such plugin")} {
		in := newInbox(time.Minute)
		w := newCall()
		in.put(w)
		a := &pluginsActor{metrics: noMetrics{}, in: in}
		go a.reply(nil, w, want)
		answered, err := w.wait()
		if !answered || err != want {
			t.Fatalf("wait = %v, %v; want true, %v", answered, err, want)
		}
		in.mu.Lock()
		held := in.calls.head
		in.mu.Unlock()
		if held != nil {
			t.Fatal("the sweep still holds an answered call")
		}
	}
}

// TestACallTimesOutOnTheThirdTickOfTheSweep: the sweep ticks every half
// request timeout, and a call put between two ticks ends on the third
// after it: having waited more than its timeout, and at most one and a
// half times it. Once no call waits, the sweep stops.
func TestACallTimesOutOnTheThirdTickOfTheSweep(t *testing.T) {
	in := newInbox(time.Hour) // the test ticks by hand
	if in.period != 30*time.Minute {
		t.Fatalf("the sweep ticks every %v, want half the timeout", in.period)
	}
	w := newCall()
	in.put(w)
	later := newCall()
	in.tick()
	in.put(later)
	for tick := 2; tick <= 3; tick++ {
		if len(w.done) != 0 {
			t.Fatalf("the call ended on tick %d", tick-1)
		}
		in.tick()
	}
	if answered, _ := w.wait(); answered {
		t.Fatal("the call did not time out on the third tick")
	}
	if len(later.done) != 0 {
		t.Fatal("a call put after the first tick ended on the third")
	}
	in.tick()
	if answered, _ := later.wait(); answered {
		t.Fatal("the later call did not time out on its own third tick")
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.sweeping || in.calls.head != nil {
		t.Fatal("the sweep still runs with no call waiting")
	}
}

// TestAClosedInboxStopsItsSweepOnceNoCallWaits: a call put before close
// is still swept until answered; once none waits, the sweep stops for good.
func TestAClosedInboxStopsItsSweepOnceNoCallWaits(t *testing.T) {
	in := newInbox(time.Hour)
	w := newCall()
	in.put(w)
	in.close()
	sweeping := func() bool {
		in.mu.Lock()
		defer in.mu.Unlock()
		return in.sweeping
	}
	if !sweeping() {
		t.Fatal("the sweep stopped while a call put before close still waits")
	}
	a := &pluginsActor{metrics: noMetrics{}, in: in}
	go a.reply(nil, w, nil)
	if answered, _ := w.wait(); !answered {
		t.Fatal("the call put before close was not answered")
	}
	if sweeping() {
		t.Fatal("the sweep of a closed inbox runs with no call waiting")
	}
}

// panicOnWrite is Metrics whose Write notes how many events its sink
// already holds, then panics, as a bug would.
type panicOnWrite struct {
	noMetrics
	sink *channelSink
	seen *int
}

func (m panicOnWrite) Write(string, error, time.Duration) {
	*m.seen = len(m.sink.out)
	panic("metrics bug")
}

// TestConcurrentCallersAreAnsweredBeforeTheEventsGoOut: while callers write
// concurrently the actor answers a batch before sending its events (a lone
// caller after), and a panic while answering still sends them (the batch
// is committed) and leaves the caller unanswered, to time out.
func TestConcurrentCallersAreAnsweredBeforeTheEventsGoOut(t *testing.T) {
	const ptype = "csi-node"
	for _, tc := range []struct {
		concurrent int
		seen       int // events the sink holds when the caller is answered
	}{{concurrentMemory, 0}, {0, 1}} {
		in := newInbox(time.Hour)
		published := &atomic.Pointer[Snapshot]{}
		published.Store(newSnapshot(nil, 0))
		subs := newSubscribers()
		sink := newChannelSink(ptype, 16)
		subs.addSink(sink)
		seen := -1
		a := &pluginsActor{log: hclog.NewNullLogger(), metrics: panicOnWrite{sink: sink, seen: &seen}, in: in,
			subs: subs, published: published, pending: newSnapshot(nil, 1), concurrent: tc.concurrent}
		w := newCall()
		w.event = &messages.PluginRegistered{Plugin: &messages.PluginInfo{Type: ptype, Name: "p", AllocId: "a"}, Sequence: 1}
		in.put(w)

		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("answering did not panic")
				}
			}()
			a.publish(nil, []*write{w})
		}()
		if seen != tc.seen {
			t.Fatalf("concurrent %d: the subscriber held %d events when the caller was answered, want %d", tc.concurrent, seen, tc.seen)
		}
		if len(sink.out) != 1 {
			t.Fatalf("concurrent %d: the subscriber got %d events, want the batch's 1", tc.concurrent, len(sink.out))
		}
		if len(w.done) != 0 {
			t.Fatalf("concurrent %d: the caller was answered, though answering panicked", tc.concurrent)
		}
	}
}

// tookMetrics is Metrics that keeps the time of each answered write.
type tookMetrics struct {
	noMetrics
	took []time.Duration
}

func (m *tookMetrics) Write(_ string, _ error, took time.Duration) { m.took = append(m.took, took) }

// TestAWriteAnsweredWithoutArrivingTookNoTime: a write the actor answers
// without having taken it from the inbox (refused as the actor stops) has
// no arrival time; the metrics get 0 for it, not the time since the zero
// time (292 years), and a write that arrived gets its time to the answer.
func TestAWriteAnsweredWithoutArrivingTookNoTime(t *testing.T) {
	m := &tookMetrics{}
	a := &pluginsActor{metrics: m}
	now := time.Now()
	a.measure(&write{}, errorf(ErrShutdown, "the registry actor stopped"), now)
	a.measure(&write{arrived: now.Add(-time.Millisecond)}, nil, now)
	if want := []time.Duration{0, time.Millisecond}; !slices.Equal(m.took, want) {
		t.Fatalf("the metrics got %v, want %v", m.took, want)
	}
}
