package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/registry"
)

// TestTheAPISocketIsNeverOpenToOthers creates the socket again and again
// under the loosest umask while another goroutine watches its mode: a
// socket made with the process's umask and narrowed afterwards would be
// seen open to group and others.
func TestTheAPISocketIsNeverOpenToOthers(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "api.sock")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var seen os.FileMode
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if info, err := os.Lstat(path); err == nil {
				seen |= info.Mode().Perm()
			}
		}
	}()
	for range 200 {
		l, err := listenUnix(path)
		require.NoError(t, err)
		info, err := os.Stat(path)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), info.Mode().Perm())
		require.NoError(t, l.Close())
	}
	close(stop)
	wg.Wait()
	require.Zero(t, seen&0o077, "the socket was seen with mode %04o", seen)
	require.Equal(t, 0, syscall.Umask(0), "the process's umask is restored")
}

func TestTheStoreIsFailingFromAFailedWriteUntilASuccessfulOne(t *testing.T) {
	storeFull := fmt.Errorf("%w: no space left on device", registry.ErrStore)
	cases := []struct {
		name   string
		writes []error
		want   string
	}{
		{"no writes yet", nil, ""},
		{"a failed write", []error{nil, storeFull}, storeFull.Error()},
		{"a success after a failure", []error{storeFull, nil}, ""},
		{"a refused request says nothing of the store", []error{storeFull, registry.ErrInvalid}, storeFull.Error()},
		{"nor does a missing plugin", []error{nil, errors.Join(registry.ErrNotFound)}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var s storeHealth
			for _, err := range tc.writes {
				s.observe(err)
			}
			require.Equal(t, tc.want, s.failing())
		})
	}
}
