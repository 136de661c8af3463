package hostpath

import (
	"bytes"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
)

// FuzzReplayJournal: any bytes in a node's journal file either replay or
// are refused with an error, never a panic. What replays is records the
// driver could have written: each with a volume ID checkID lets in, and
// something worth keeping. Its whole lines end at good, and replaying
// only those gives the same records. The records written out again as a
// journal replay to themselves.
func FuzzReplayJournal(f *testing.F) {
	var whole []byte
	for _, rec := range []nodeRecord{
		{VolumeID: "hp-a", StagingPath: "/s/a", StagingMounted: true, MountGroup: "1000"},
		{VolumeID: "hp-b", Targets: map[string]publication{"/t/b": {Readonly: true, AccessMode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}},
		{VolumeID: "hp-a"},
	} {
		var err error
		whole, err = encodeJournalLine(whole, rec)
		require.NoError(f, err)
	}
	f.Add(whole)
	f.Add(whole[:len(whole)-7])
	f.Add(append(append([]byte{}, whole...), "00000000 {}\n"...))
	dots, err := encodeJournalLine(nil, nodeRecord{VolumeID: "..", StagingPath: "/s/dots"})
	require.NoError(f, err)
	f.Add(dots)
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, data []byte) {
		recs, good, lines, err := replayJournal("journal", data)
		if err != nil {
			require.Nil(t, recs)
			require.ErrorContains(t, err, "journal line ")
			return
		}
		require.LessOrEqual(t, good, len(data))
		require.Equal(t, lines, bytes.Count(data[:good], []byte("\n")))
		for id, rec := range recs {
			require.Equal(t, id, rec.VolumeID)
			require.NoError(t, checkID("volume", id))
			require.False(t, rec.empty(), "volume %q", id)
		}
		again, againGood, _, err := replayJournal("journal", data[:good])
		require.NoError(t, err)
		require.Equal(t, good, againGood)
		require.Equal(t, recs, again)

		var out []byte
		for _, rec := range recs {
			out, err = encodeJournalLine(out, rec)
			require.NoError(t, err)
		}
		written, writtenGood, _, err := replayJournal("journal", out)
		require.NoError(t, err)
		require.Equal(t, len(out), writtenGood)
		require.Equal(t, len(recs), len(written))
		for id, rec := range recs {
			require.Equal(t, rec.VolumeID, written[id].VolumeID)
			require.Equal(t, rec.StagingPath, written[id].StagingPath)
			require.Equal(t, len(rec.Targets), len(written[id].Targets))
		}
	})
}
