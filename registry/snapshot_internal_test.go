package registry

import "testing"

// TestSnapshotChangedClosesWhenAskedBeforeOrAfter: Changed is made on
// demand; it closes once the snapshot is replaced whether a reader asked
// for it before, after or while the publisher replaced it.
func TestSnapshotChangedClosesWhenAskedBeforeOrAfter(t *testing.T) {
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	before := newSnapshot(nil, 1)
	ch := before.Changed()
	if closed(ch) {
		t.Fatal("Changed is closed before the snapshot was replaced")
	}
	before.supersede()
	if !closed(ch) || !closed(before.Changed()) {
		t.Fatal("Changed asked before the replacement did not close")
	}
	after := newSnapshot(nil, 1)
	after.supersede()
	if !closed(after.Changed()) {
		t.Fatal("Changed asked after the replacement is not closed")
	}
	for range 200 {
		s := newSnapshot(nil, 1)
		got := make(chan (<-chan struct{}), 4)
		for range 4 {
			go func() { got <- s.Changed() }()
		}
		s.supersede()
		for range 4 {
			if c := <-got; !closed(c) {
				<-c // must close by now: a hang here fails the test
			}
		}
	}
}
