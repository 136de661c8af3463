package dockervolume_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/discovery"
	"github.com/plugvisor/plugvisor/dockervolume"
)

// droppingListener closes the first drop connections it accepts before a
// byte is read (the client sees the plugin as unreachable), and counts
// every connection.
type droppingListener struct {
	net.Listener
	drop     int64
	accepted atomic.Int64
}

func (l *droppingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.accepted.Add(1) > l.drop {
			return c, nil
		}
		c.Close()
	}
}

// startDropping serves h behind a droppingListener until the test ends.
func startDropping(t *testing.T, drop int64, h http.HandlerFunc) (*droppingListener, *dockervolume.Client) {
	l, client := pluginSocket(t)
	dl := &droppingListener{Listener: l, drop: drop}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = dl
	srv.Start()
	t.Cleanup(srv.Close)
	return dl, client()
}

// fastRetry retries as moby does, a hundred times faster.
var fastRetry = dockervolume.Retry{Within: 300 * time.Millisecond, First: 10 * time.Millisecond}

func TestACallRetriesAPluginItCannotReachUntilItAnswers(t *testing.T) {
	l, c := startDropping(t, 3, func(w http.ResponseWriter, r *http.Request) {
		answer(w, `{"Mountpoint": "/mnt/v"}`)
	})
	got, err := c.WithRetry(dockervolume.Retry{Within: time.Minute, First: 10 * time.Millisecond}).Path(context.Background(), "v")
	require.NoError(t, err)
	require.Equal(t, "/mnt/v", got)
	require.EqualValues(t, 4, l.accepted.Load(), "three dropped connections, then the answer")
}

func TestACallGivesUpOnAnUnreachablePluginWithinItsBound(t *testing.T) {
	l, c := startDropping(t, 1<<62, func(w http.ResponseWriter, r *http.Request) {})
	start := time.Now()
	_, err := c.WithRetry(fastRetry).Path(context.Background(), "v")
	require.ErrorIs(t, err, discovery.ErrUnreachable)
	// At most waits of 10, 20, 40 and 80 ms: the next (160 ms) would end
	// past 300 ms; fewer when the attempts themselves are slow.
	require.GreaterOrEqual(t, l.accepted.Load(), int64(2))
	require.LessOrEqual(t, l.accepted.Load(), int64(5))
	require.Less(t, time.Since(start), 30*time.Second, "the bound is the Retry's, not moby's 30 s")
}

func TestAPluginsOwnErrorIsNeverRetried(t *testing.T) {
	l, c := startDropping(t, 0, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		answer(w, `{"Err": "disk full"}`)
	})
	err := c.WithRetry(dockervolume.Retry{Within: time.Minute, First: 10 * time.Millisecond}).Create(context.Background(), "v", nil)
	require.ErrorIs(t, err, discovery.ErrPluginFailed)
	require.ErrorContains(t, err, "disk full")
	require.EqualValues(t, 1, l.accepted.Load())
}

func TestNoRetryMakesOneAttempt(t *testing.T) {
	l, c := startDropping(t, 1<<62, func(w http.ResponseWriter, r *http.Request) {})
	_, err := c.WithRetry(dockervolume.NoRetry).Path(context.Background(), "v")
	require.ErrorIs(t, err, discovery.ErrUnreachable)
	require.EqualValues(t, 1, l.accepted.Load())
}

func TestRetryingStopsWhenTheCallersContextEnds(t *testing.T) {
	_, c := startDropping(t, 1<<62, func(w http.ResponseWriter, r *http.Request) {})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.WithRetry(dockervolume.Retry{Within: time.Hour, First: time.Hour}).Path(ctx, "v")
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		require.Error(t, err)
	case <-time.After(time.Minute):
		t.Fatal("the call kept waiting after its context ended")
	}
}
