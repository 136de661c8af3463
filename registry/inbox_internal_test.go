package registry

import (
	"testing"
	"time"
)

// TestACallThatTimedOutNeverHoldsUpTheActor: a facade call whose request
// timeout passed before its answer returns unanswered, and the actor's
// late answer neither blocks nor reaches anyone.
func TestACallThatTimedOutNeverHoldsUpTheActor(t *testing.T) {
	w := newCall()
	if answered, _ := w.wait(time.Millisecond); answered {
		t.Fatal("nobody answered, yet the call says it was answered")
	}
	a := &pluginsActor{metrics: noMetrics{}}
	for range 2 { // the second stands for an answer after the timer's own
		replied := make(chan struct{})
		go func() { a.reply(nil, w, nil); close(replied) }()
		select {
		case <-replied:
		case <-time.After(10 * time.Second):
			t.Fatal("the actor's answer to a call that timed out blocked")
		}
	}
}

// TestAnAnsweredCallReturnsItsAnswer: the answer, error or nil, is what
// the caller gets, and its timer is stopped.
func TestAnAnsweredCallReturnsItsAnswer(t *testing.T) {
	for _, want := range []error{nil, errorf(ErrNotFound, "no such plugin")} {
		w := newCall()
		a := &pluginsActor{metrics: noMetrics{}}
		go a.reply(nil, w, want)
		answered, err := w.wait(time.Minute)
		if !answered || err != want {
			t.Fatalf("wait = %v, %v; want true, %v", answered, err, want)
		}
		if w.timer.Stop() {
			t.Fatal("the timer of an answered call still runs")
		}
	}
}
