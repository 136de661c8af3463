package hostpath

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestJournalKeepsEveryAcknowledgedChange saves records of 50 volumes at
// once, several changes each, and a forgotten volume; a journal opened
// again on the file (as after a kill) holds exactly the last change of
// each, and another process's reader sees the same.
func TestJournalKeepsEveryAcknowledgedChange(t *testing.T) {
	dir := t.TempDir()
	j, err := openNodeJournal(dir)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			id := fmt.Sprintf("v%d", i)
			for step := range 4 {
				rec := nodeRecord{VolumeID: id, StagingPath: fmt.Sprintf("/s/%d", step),
					Targets: map[string]publication{fmt.Sprintf("/t/%d", step): {Readonly: step%2 == 0}}}
				if i == 0 && step == 3 {
					rec = nodeRecord{VolumeID: id}
				}
				require.NoError(t, j.save(rec))
			}
		})
	}
	wg.Wait()
	want := map[string]nodeRecord{}
	j.all(func(rec nodeRecord) { want[rec.VolumeID] = rec })
	require.Len(t, want, 49)
	require.Equal(t, nodeRecord{VolumeID: "v7", StagingPath: "/s/3", Targets: map[string]publication{"/t/3": {}}}, want["v7"])
	require.Positive(t, j.syncs.Load())
	require.Positive(t, j.busy.Load(), "the time spent writing and syncing is counted")
	j.close() // not needed for durability: every save was synced

	again, err := openNodeJournal(dir)
	require.NoError(t, err)
	defer again.close()
	got := map[string]nodeRecord{}
	again.all(func(rec nodeRecord) { got[rec.VolumeID] = rec })
	require.Equal(t, want, got)
	read, err := readNodeRecords(dir)
	require.NoError(t, err)
	require.Equal(t, want, read)
}

// TestJournalDropsALastLineCutShortAndRefusesCorruption: a last line a
// crash cut short (no newline, or a bad checksum) is dropped and the file
// truncated, so that the next change appends after the last whole line;
// a bad line before the last is an error naming the file and the line.
func TestJournalDropsALastLineCutShortAndRefusesCorruption(t *testing.T) {
	dir := t.TempDir()
	j, err := openNodeJournal(dir)
	require.NoError(t, err)
	require.NoError(t, j.save(nodeRecord{VolumeID: "a", StagingPath: "/s/a"}))
	require.NoError(t, j.save(nodeRecord{VolumeID: "b", StagingPath: "/s/b"}))
	j.close()
	path := filepath.Join(dir, journalName)
	whole, err := os.ReadFile(path)
	require.NoError(t, err)

	for name, tail := range map[string]string{"cut": `0badc0de {"volume_id":"c","stag`, "bad sum": `00000000 {"volume_id":"c"}` + "\n"} {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(path, append(append([]byte{}, whole...), tail...), 0o600))
			j, err := openNodeJournal(dir)
			require.NoError(t, err)
			require.NoError(t, j.save(nodeRecord{VolumeID: "d", StagingPath: "/s/d"}))
			j.close()
			recs, err := readNodeRecords(dir)
			require.NoError(t, err)
			require.Equal(t, []string{"a", "b", "d"}, slices.Sorted(maps.Keys(recs)))
		})
	}

	corrupt := append([]byte("00000000 {}\n"), whole...)
	require.NoError(t, os.WriteFile(path, corrupt, 0o600))
	_, err = openNodeJournal(dir)
	require.ErrorContains(t, err, path+" line 1 is corrupt")

	// A line whose checksum holds but whose volume ID the driver would
	// refuse from a CO is no record of its own either.
	for _, id := range []string{"", "..", "a/../../b", "a\x00b", strings.Repeat("v", MaxIDLength+1)} {
		line, err := encodeJournalLine(nil, nodeRecord{VolumeID: id, StagingPath: "/s/x"})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, append(line, whole...), 0o600))
		_, err = openNodeJournal(dir)
		require.ErrorContains(t, err, path+" line 1 is corrupt", "volume ID %q", id)
		require.ErrorContains(t, err, "volume id", "volume ID %q", id)
	}
}

// TestJournalTakesOverRecordFilesOfAnEarlierVersion: a node directory with
// one record file per volume (the earlier layout) opens with those records
// in the journal, and the files are gone.
func TestJournalTakesOverRecordFilesOfAnEarlierVersion(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, writeJSON(filepath.Join(dir, "old"+recordSuffix), nodeRecord{VolumeID: "old", StagingPath: "/s/old"}))
	j, err := openNodeJournal(dir)
	require.NoError(t, err)
	require.Equal(t, "/s/old", j.get("old").StagingPath)
	require.NoError(t, j.save(nodeRecord{VolumeID: "new", StagingPath: "/s/new"}))
	j.close()
	ids, err := recordIDs(dir)
	require.NoError(t, err)
	require.Empty(t, ids)
	recs, err := readNodeRecords(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"new", "old"}, slices.Sorted(maps.Keys(recs)))
}

// TestJournalIsRewrittenWhenMostLinesAreStale: after many changes of one
// record, the file holds a few lines, not one per change.
func TestJournalIsRewrittenWhenMostLinesAreStale(t *testing.T) {
	dir := t.TempDir()
	j, err := openNodeJournal(dir)
	require.NoError(t, err)
	for i := range 3 * journalCompactLines {
		require.NoError(t, j.save(nodeRecord{VolumeID: "v", StagingPath: fmt.Sprintf("/s/%d", i)}))
	}
	j.close()
	recs, lines, err := func() (map[string]nodeRecord, int, error) {
		data, err := os.ReadFile(filepath.Join(dir, journalName))
		require.NoError(t, err)
		recs, _, lines, err := replayJournal("journal", data)
		return recs, lines, err
	}()
	require.NoError(t, err)
	require.LessOrEqual(t, lines, journalCompactLines+3)
	require.Equal(t, fmt.Sprintf("/s/%d", 3*journalCompactLines-1), recs["v"].StagingPath)
}
