package probe

import (
	"fmt"
	"strings"
	"time"
)

// Matcher accepts the messages of one expectation of ExpectAll. Make one
// with Match.
type Matcher struct {
	want  string
	match func(any) bool
}

// Match is the Matcher of the messages that are a T and that match accepts
// (any T when match is nil).
func Match[T any](match func(T) bool) Matcher {
	return Matcher{want: typeName[T](), match: func(m any) bool {
		msg, isT := m.(T)
		return isT && (match == nil || match(msg))
	}}
}

// ExpectAll waits until each matcher has matched a message of its own, in
// whatever order the messages arrive, and returns them in the matchers'
// order: for messages from different actors (an old instance's last report
// and a new one's first) whose order nobody promises. A message goes to
// the first matcher, in the order given, that accepts it and has none yet.
//
// The messages that no matcher took are not lost, unlike FishFor's: they
// stay in the probe, in the order they came, for the next expectation.
// ExpectAll fails the test, naming what is still missing and what it
// passed over, when the matchers are not all matched within timeout.
func (p *Probe) ExpectAll(t TB, timeout time.Duration, matchers ...Matcher) []any {
	t.Helper()
	deadline := time.Now().Add(timeout)
	got := make([]any, len(matchers))
	var passed []Received
	defer func() { p.putBack(passed) }()
	for missing := len(matchers); missing > 0; {
		r, ok := p.next(time.Until(deadline))
		if !ok {
			t.Fatalf("probe: within %v, still expected %s; passed over %d: [%s]",
				timeout, wanted(matchers, got), len(passed), kinds(passed))
		}
		i := matching(matchers, got, r.Message)
		if i < 0 {
			passed = append(passed, r)
			continue
		}
		got[i] = r.Message
		missing--
	}
	return got
}

// ExpectUnordered expects the next len(want) messages to equal want, in
// any order: each wanted message once, and nothing else among them.
// Protobuf messages are compared with proto.Equal, others with
// reflect.DeepEqual.
func (p *Probe) ExpectUnordered(t TB, timeout time.Duration, want ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	matched := make([]bool, len(want))
	for n := range want {
		r, ok := p.next(time.Until(deadline))
		if !ok {
			t.Fatalf("probe: message %d of %d (any order): none arrived within %v; still expected %s",
				n+1, len(want), timeout, unmatched(want, matched))
		}
		i := indexEqual(want, matched, r.Message)
		if i < 0 {
			t.Fatalf("probe: message %d of %d (any order): got %T %s; expected one of %s",
				n+1, len(want), r.Message, describe(r.Message), unmatched(want, matched))
		}
		matched[i] = true
	}
}

// putBack returns messages to the front of the queue, in their order.
func (p *Probe) putBack(messages []Received) {
	if len(messages) == 0 {
		return
	}
	p.mu.Lock()
	p.queue = append(messages, p.queue...)
	p.mu.Unlock()
	select {
	case p.notify <- struct{}{}:
	default:
	}
}

func matching(matchers []Matcher, got []any, msg any) int {
	for i, m := range matchers {
		if got[i] == nil && m.match(msg) {
			return i
		}
	}
	return -1
}

func indexEqual(want []any, matched []bool, msg any) int {
	for i, w := range want {
		if !matched[i] && equal(w, msg) {
			return i
		}
	}
	return -1
}

func wanted(matchers []Matcher, got []any) string {
	var out []string
	for i, m := range matchers {
		if got[i] == nil {
			out = append(out, "a matching "+m.want)
		}
	}
	return strings.Join(out, ", ")
}

func unmatched(want []any, matched []bool) string {
	var out []string
	for i, w := range want {
		if !matched[i] {
			out = append(out, fmt.Sprintf("%T %s", w, describe(w)))
		}
	}
	return "[" + strings.Join(out, ", ") + "]"
}

func kinds(messages []Received) string {
	out := make([]string, len(messages))
	for i, r := range messages {
		out[i] = fmt.Sprintf("%T", r.Message)
	}
	return strings.Join(out, ", ")
}
