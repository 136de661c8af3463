package sdnotify_test

import (
	"net"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/internal/sdnotify"
)

// fakeSystemd listens where $NOTIFY_SOCKET says, as systemd does for a
// unit of Type=notify, and returns the datagrams it receives.
func fakeSystemd(t *testing.T, name string) <-chan string {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	got := make(chan string, 8)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(got)
				return
			}
			got <- string(buf[:n])
		}
	}()
	return got
}

func receive(t *testing.T, got <-chan string) string {
	t.Helper()
	select {
	case s := <-got:
		return s
	case <-time.After(30 * time.Second):
		t.Fatal("the fake systemd received nothing within 30s")
		return ""
	}
}

func TestNotifySendsEachStateToTheSocketNotifySocketNames(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	got := fakeSystemd(t, path)
	t.Setenv(sdnotify.SocketEnv, path)

	sent, err := sdnotify.Notify(sdnotify.Ready, sdnotify.Status("serving"))
	require.NoError(t, err)
	require.True(t, sent)
	require.Equal(t, "READY=1\nSTATUS=serving", receive(t, got))

	_, err = sdnotify.Notify(sdnotify.Reloading())
	require.NoError(t, err)
	require.Regexp(t, regexp.MustCompile(`^RELOADING=1\nMONOTONIC_USEC=[1-9][0-9]*$`), receive(t, got))

	_, err = sdnotify.Notify(sdnotify.Stopping)
	require.NoError(t, err)
	require.Equal(t, "STOPPING=1", receive(t, got))
}

func TestNotifyReachesASocketInTheAbstractNamespace(t *testing.T) {
	name := "plugvisor-sdnotify-test-" + filepath.Base(t.TempDir())
	got := fakeSystemd(t, "\x00"+name)
	t.Setenv(sdnotify.SocketEnv, "@"+name)

	_, err := sdnotify.Notify(sdnotify.Ready)
	require.NoError(t, err)
	require.Equal(t, "READY=1", receive(t, got))
}

func TestNotifyOutsideSystemdDoesNothing(t *testing.T) {
	t.Setenv(sdnotify.SocketEnv, "")
	sent, err := sdnotify.Notify(sdnotify.Ready)
	require.NoError(t, err)
	require.False(t, sent)
}

func TestNotifyToASocketThatIsGoneSaysSo(t *testing.T) {
	t.Setenv(sdnotify.SocketEnv, filepath.Join(t.TempDir(), "gone"))
	sent, err := sdnotify.Notify(sdnotify.Ready)
	require.ErrorContains(t, err, "sd_notify")
	require.False(t, sent)
}

func TestStatusIsOneLine(t *testing.T) {
	require.Equal(t, "STATUS=a b", sdnotify.Status("a\nb"))
}
