package storage_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBoltKeepsAcknowledgedWritesAfterSIGKILL kills a writer process mid-way
// and checks that every key it acknowledged (printed after Apply returned) is
// in the file when it is opened again.
func TestBoltKeepsAcknowledgedWritesAfterSIGKILL(t *testing.T) {
	const killAfter = 300 // acknowledged keys
	path := filepath.Join(t.TempDir(), "state.db")
	writer := startHelper(t, helperWrite, path)

	acked := make(map[string]bool)
	for len(acked) < killAfter {
		acked[writer.nextLine(t)] = true
	}
	require.NoError(t, writer.cmd.Process.Kill())
	// Keys printed before the kill landed were acknowledged too.
	for writer.lines.Scan() {
		acked[writer.lines.Text()] = true
	}
	require.Error(t, writer.cmd.Wait(), "the writer was killed, not finished")

	s := openBolt(t, path)
	stored := make(map[string]bool)
	require.NoError(t, bucket(t, s, crashBucket).Load(func(key, value []byte) error {
		stored[string(key)] = true
		return nil
	}))
	var missing []string
	for key := range acked {
		if !stored[key] {
			missing = append(missing, key)
		}
	}
	t.Logf("writer killed after %d acknowledged keys; the file holds %d (%d applied but not yet acknowledged), %d missing",
		len(acked), len(stored), len(stored)-len(acked)+len(missing), len(missing))
	require.Empty(t, missing, "acknowledged keys lost")
	require.GreaterOrEqual(t, len(stored), killAfter)
}
