package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
)

func eventsRegistry(t *testing.T) *registry.Registry {
	t.Helper()
	bucket, err := storage.NewMemory().Bucket(registry.BucketName)
	require.NoError(t, err)
	r, err := registry.New(probe.NewSystem(t), registry.Config{Bucket: bucket, Logger: probe.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Shutdown()) })
	return r
}

func register(t *testing.T, r *registry.Registry, name string) {
	t.Helper()
	require.NoError(t, r.RegisterPlugin(&messages.PluginInfo{
		Type: "csi-node", Name: name, AllocId: "a1",
		Connection: &messages.ConnectionInfo{SocketPath: "/run/" + name + ".sock"},
	}))
}

func lines(t *testing.T, body string) []Event {
	t.Helper()
	var out []Event
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		var ev Event
		require.NoError(t, json.Unmarshal(sc.Bytes(), &ev), "line %q", sc.Text())
		out = append(out, ev)
	}
	return out
}

func TestAStreamCutForLagEndsWithALaggedLine(t *testing.T) {
	r := eventsRegistry(t)
	register(t, r, "before")
	sub, err := r.Subscribe(context.Background(), "csi-node", registry.SubscribeOptions{Replay: true, MaxBacklog: 2})
	require.NoError(t, err)
	// Nobody reads while six events arrive: more than the backlog holds.
	for i := range 6 {
		register(t, r, fmt.Sprint("p", i))
	}
	rec := httptest.NewRecorder()
	stream(rec, sub, nil, true)

	got := lines(t, rec.Body.String())
	require.NotEmpty(t, got)
	require.Equal(t, "registered", got[0].Kind)
	require.True(t, got[0].Replayed, "the plugin registered before the stream is replayed")
	require.Less(t, len(got), 8, "the stream was cut before every event")
	lastLine := got[len(got)-1]
	require.Equal(t, KindLagged, lastLine.Kind)
	require.Contains(t, lastLine.Error, "behind")
	require.Empty(t, lastLine.Event)
	require.Equal(t, got[len(got)-2].Sequence, lastLine.Sequence, "the lagged line names the last event sent")
}

func TestAStreamEndedByShutdownHasNoLaggedLine(t *testing.T) {
	r := eventsRegistry(t)
	sub, err := r.Subscribe(context.Background(), "csi-node", registry.SubscribeOptions{})
	require.NoError(t, err)
	register(t, r, "p")
	done := make(chan string)
	go func() {
		rec := httptest.NewRecorder()
		stream(rec, sub, nil, false)
		done <- rec.Body.String()
	}()
	require.NoError(t, r.Shutdown())
	select {
	case body := <-done:
		got := lines(t, body)
		require.Len(t, got, 1)
		require.Equal(t, "registered", got[0].Kind)
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end at shutdown")
	}
}
