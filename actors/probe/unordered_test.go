package probe_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/messages"
)

func allocNamed(name, alloc string) *messages.PluginInfo {
	return &messages.PluginInfo{Type: "csi-node", Name: name, AllocId: alloc}
}

func ofAlloc(alloc string) probe.Matcher {
	return probe.Match(func(m *messages.PluginInfo) bool { return m.GetAllocId() == alloc })
}

func TestExpectAllTakesTheMessagesInEitherOrder(t *testing.T) {
	for _, order := range [][]string{{"old", "new"}, {"new", "old"}} {
		t.Run(order[0]+" first", func(t *testing.T) {
			system := probe.NewSystem(t)
			p := probe.New(t, system)
			for _, alloc := range order {
				system.Root.Send(p.PID(), allocNamed("p", alloc))
			}
			got := p.ExpectAll(t, time.Second, ofAlloc("old"), ofAlloc("new"))
			require.Equal(t, "old", got[0].(*messages.PluginInfo).GetAllocId(), "in the matchers' order")
			require.Equal(t, "new", got[1].(*messages.PluginInfo).GetAllocId())
		})
	}
}

func TestExpectAllKeepsWhatItPassedOver(t *testing.T) {
	system := probe.NewSystem(t)
	p := probe.New(t, system)
	system.Root.Send(p.PID(), allocNamed("p", "new"))
	system.Root.Send(p.PID(), &messages.Unsubscribed{Type: "first"})
	system.Root.Send(p.PID(), allocNamed("other", "x"))
	system.Root.Send(p.PID(), allocNamed("p", "old"))
	system.Root.Send(p.PID(), &messages.Unsubscribed{Type: "after"})

	p.ExpectAll(t, time.Second, ofAlloc("old"), ofAlloc("new"))

	p.ExpectMessages(t, time.Second, &messages.Unsubscribed{Type: "first"}, allocNamed("other", "x"),
		&messages.Unsubscribed{Type: "after"})
}

func TestExpectAllGivesEachMatcherAMessageOfItsOwn(t *testing.T) {
	system := probe.NewSystem(t)
	p := probe.New(t, system)
	system.Root.Send(p.PID(), allocNamed("p", "a1"))
	anyPlugin := probe.Match[*messages.PluginInfo](nil)
	failure := runFailing(t, func(tb probe.TB) {
		p.ExpectAll(tb, 50*time.Millisecond, anyPlugin, ofAlloc("a1"))
	})
	require.Contains(t, failure, "still expected a matching *messages.PluginInfo")

	system.Root.Send(p.PID(), allocNamed("p", "a1"))
	system.Root.Send(p.PID(), allocNamed("p", "a2"))
	got := p.ExpectAll(t, time.Second, ofAlloc("a1"), anyPlugin)
	require.Equal(t, "a2", got[1].(*messages.PluginInfo).GetAllocId())
}

func TestExpectAllFailsNamingWhatIsMissingAndWhatItPassedOver(t *testing.T) {
	system := probe.NewSystem(t)
	p := probe.New(t, system)
	system.Root.Send(p.PID(), allocNamed("p", "old"))
	system.Root.Send(p.PID(), &messages.Unsubscribed{Type: "csi-node"})
	failure := runFailing(t, func(tb probe.TB) {
		p.ExpectAll(tb, 50*time.Millisecond, ofAlloc("old"), probe.Match[*messages.Subscribed](nil))
	})
	require.Contains(t, failure, "within 50ms, still expected a matching *messages.Subscribed")
	require.Contains(t, failure, "passed over 1: [*messages.Unsubscribed]")
	p.ExpectMessages(t, time.Second, &messages.Unsubscribed{Type: "csi-node"})
}

func TestExpectUnorderedWantsExactlyTheseMessagesInAnyOrder(t *testing.T) {
	for _, order := range [][]string{{"a1", "a2"}, {"a2", "a1"}} {
		t.Run(order[0]+" first", func(t *testing.T) {
			system := probe.NewSystem(t)
			p := probe.New(t, system)
			for _, alloc := range order {
				system.Root.Send(p.PID(), allocNamed("p", alloc))
			}
			p.ExpectUnordered(t, time.Second, allocNamed("p", "a1"), allocNamed("p", "a2"))
		})
	}
}

func TestExpectUnorderedFailsOnAMessageItDidNotWant(t *testing.T) {
	system := probe.NewSystem(t)
	p := probe.New(t, system)
	system.Root.Send(p.PID(), allocNamed("p", "a1"))
	system.Root.Send(p.PID(), allocNamed("p", "a1"))
	failure := runFailing(t, func(tb probe.TB) {
		p.ExpectUnordered(tb, time.Second, allocNamed("p", "a1"), allocNamed("p", "a2"))
	})
	require.Contains(t, failure, "message 2 of 2 (any order): got *messages.PluginInfo")
	require.Contains(t, failure, "; expected one of [*messages.PluginInfo")
	require.Contains(t, failure, `alloc_id:"a2"}]`)
}

func TestExpectUnorderedFailsWhenOneDoesNotArrive(t *testing.T) {
	system := probe.NewSystem(t)
	p := probe.New(t, system)
	system.Root.Send(p.PID(), allocNamed("p", "a2"))
	failure := runFailing(t, func(tb probe.TB) {
		p.ExpectUnordered(tb, 50*time.Millisecond, allocNamed("p", "a1"), allocNamed("p", "a2"))
	})
	require.Contains(t, failure, "message 2 of 2 (any order): none arrived within 50ms; still expected [*messages.PluginInfo")
	require.Contains(t, failure, `alloc_id:"a1"`)
}
