package hostpath

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// journalName is the file, in a node's state directory, that holds the
// node's records.
const journalName = "journal"

// journalCompactLines is how many lines a journal may hold beyond twice
// its records before the node rewrites it with one line per record.
const journalCompactLines = 1024

// nodeJournal is a node's records of volumes: an append-only file in the
// node's state directory with one line per change of a record (the whole
// record; an empty one forgets the volume), and a copy of every record in
// memory. A change is acknowledged once its line is synced. Changes that
// arrive while a sync runs are written and synced together by the next one
// (group commit), so that volumes staged and published at once share their
// syncs, as a real driver's state would, instead of each replacing a file.
// A line carries its CRC-32C: a line a crash cut short can only be the
// last one, and is dropped when the node opens the journal; any other bad
// line is corruption, and the node does not start.
type nodeJournal struct {
	path string

	// mu guards the fields below.
	mu   sync.Mutex
	recs map[string]nodeRecord
	// lines counts the lines in the file.
	lines int
	// broken is set once a write or sync failed: what is on disk is then
	// unknown, and every later change fails.
	broken error
	// leading is set while a writer writes and syncs the batch; pending
	// is the batch the next one writes.
	leading bool
	pending journalBatch
	// f is written only by the leading writer.
	f *os.File
	// closed is set by close; the file is closed once no writer leads.
	closed bool
	// syncs counts the file's syncs (see Driver.JournalSyncs).
	syncs atomic.Int64
	// busy is the time spent writing and syncing batches (see
	// Driver.JournalTime).
	busy atomic.Int64
}

// journalBatch is the changes written and synced together.
type journalBatch struct {
	data    []byte
	recs    []nodeRecord
	waiters []chan error
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// openNodeJournal reads the journal in dir, truncating a last line a
// crash cut short, and opens it for appending. Records of an earlier
// version of the driver, one file per volume in dir, are moved into it.
func openNodeJournal(dir string) (*nodeJournal, error) {
	path := filepath.Join(dir, journalName)
	data, recs, good, lines, err := loadJournal(path)
	if err != nil {
		return nil, err
	}
	legacy, err := readLegacyRecords(dir, recs)
	if err != nil {
		return nil, err
	}
	j := &nodeJournal{path: path, recs: recs, lines: lines}
	if len(legacy) > 0 || lines > 2*len(recs)+journalCompactLines {
		if err := j.rewrite(); err != nil {
			return nil, err
		}
		for _, id := range legacy {
			if err := removeRecord(filepath.Join(dir, id+recordSuffix)); err != nil {
				return nil, err
			}
		}
		return j, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o600)
	if err == nil && good < len(data) {
		err = f.Truncate(int64(good))
	}
	if err == nil {
		_, err = f.Seek(int64(good), 0)
	}
	if err != nil {
		if f != nil {
			_ = f.Close()
		}
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	j.f = f
	return j, nil
}

// readNodeRecords reads the records of the node whose state directory is
// dir, as another process may be writing them: a last line cut short is a
// write in progress, and is not read.
func readNodeRecords(dir string) (map[string]nodeRecord, error) {
	_, recs, _, _, err := loadJournal(filepath.Join(dir, journalName))
	if err != nil {
		return nil, err
	}
	if _, err := readLegacyRecords(dir, recs); err != nil {
		return nil, err
	}
	return recs, nil
}

// readLegacyRecords reads into recs the records an earlier version of the
// driver kept in dir, one file per volume, and returns their IDs.
func readLegacyRecords(dir string, recs map[string]nodeRecord) ([]string, error) {
	ids, err := recordIDs(dir)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		rec := nodeRecord{VolumeID: id}
		if _, err := readJSON(filepath.Join(dir, id+recordSuffix), &rec); err != nil {
			return nil, err
		}
		recs[id] = rec
	}
	return ids, nil
}

// loadJournal reads the journal at path (none is an empty one) and
// replays it (see replayJournal).
func loadJournal(path string) (data []byte, recs map[string]nodeRecord, good, lines int, err error) {
	data, err = os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, 0, 0, fmt.Errorf("read %s: %w", path, err)
	}
	recs, good, lines, err = replayJournal(path, data)
	return data, recs, good, lines, err
}

// replayJournal returns the records data holds, how many of its bytes are
// whole lines, and how many lines. A bad line that is not the last one is
// an error naming the file and the line.
func replayJournal(path string, data []byte) (recs map[string]nodeRecord, good, lines int, err error) {
	recs = map[string]nodeRecord{}
	for good < len(data) {
		end := bytes.IndexByte(data[good:], '\n')
		if end < 0 {
			return recs, good, lines, nil // cut short by a crash
		}
		line := data[good : good+end]
		rec, err := decodeJournalLine(line)
		if err != nil {
			if good+end+1 == len(data) {
				return recs, good, lines, nil // cut short by a crash
			}
			return nil, 0, 0, fmt.Errorf("%s line %d is corrupt (%v): the node's records cannot be trusted; "+
				"unmount its volumes by hand and remove the file", path, lines+1, err)
		}
		if rec.empty() {
			delete(recs, rec.VolumeID)
		} else {
			recs[rec.VolumeID] = rec
		}
		good += end + 1
		lines++
	}
	return recs, good, lines, nil
}

// encodeJournalLine is rec's line: its CRC-32C in hex, a space, its JSON,
// a newline.
func encodeJournalLine(buf []byte, rec nodeRecord) ([]byte, error) {
	data, err := json.Marshal(rec)
	if err != nil {
		return buf, fmt.Errorf("encode node record of %s: %w", rec.VolumeID, err)
	}
	buf = fmt.Appendf(buf, "%08x ", crc32.Checksum(data, castagnoli))
	buf = append(buf, data...)
	return append(buf, '\n'), nil
}

func decodeJournalLine(line []byte) (nodeRecord, error) {
	var rec nodeRecord
	sum, data, ok := bytes.Cut(line, []byte(" "))
	if !ok || len(sum) != 8 {
		return rec, errors.New("no checksum")
	}
	want, err := strconv.ParseUint(string(sum), 16, 32)
	if err != nil || uint32(want) != crc32.Checksum(data, castagnoli) {
		return rec, errors.New("checksum mismatch")
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		return rec, err
	}
	// The driver looks records up by IDs that checkID let in, and a
	// record's ID names the volume's directory: one it would refuse is no
	// record of its own.
	if err := checkID("volume", rec.VolumeID); err != nil {
		return rec, err
	}
	return rec, nil
}

// get returns the record of volume id, or an empty one.
func (j *nodeJournal) get(id string) nodeRecord {
	j.mu.Lock()
	defer j.mu.Unlock()
	if rec, ok := j.recs[id]; ok {
		rec.Targets = maps.Clone(rec.Targets)
		return rec
	}
	return nodeRecord{VolumeID: id}
}

// all calls f with every record.
func (j *nodeJournal) all(f func(nodeRecord)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, rec := range j.recs {
		f(rec)
	}
}

// save makes rec durable (forgetting the volume when rec is empty) and
// returns once it is synced. The caller holds the volume's lock, so
// records of one volume are saved one at a time.
func (j *nodeJournal) save(rec nodeRecord) error {
	rec.Targets = maps.Clone(rec.Targets)
	done := make(chan error, 1)
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return errors.New("the driver is stopped")
	}
	if j.broken != nil {
		j.mu.Unlock()
		return j.broken
	}
	var err error
	if j.pending.data, err = encodeJournalLine(j.pending.data, rec); err != nil {
		j.mu.Unlock()
		return err
	}
	j.pending.recs = append(j.pending.recs, rec)
	j.pending.waiters = append(j.pending.waiters, done)
	if !j.leading {
		// Lead, but first yield the processor once with the lead taken, so
		// that runnable handlers about to save join this batch rather than
		// wait for the next sync (as storage's group commit does).
		j.leading = true
		j.mu.Unlock()
		runtime.Gosched()
		j.mu.Lock()
		j.lead()
	}
	j.mu.Unlock()
	return <-done
}

// lead writes and syncs batches until none is pending, with j.mu held
// except while writing.
func (j *nodeJournal) lead() {
	j.leading = true
	for len(j.pending.waiters) > 0 {
		batch := j.pending
		j.pending = journalBatch{}
		err := j.broken
		if err == nil {
			j.mu.Unlock()
			start := time.Now()
			err = j.write(batch.data)
			j.busy.Add(int64(time.Since(start)))
			j.mu.Lock()
		}
		if err == nil {
			for _, rec := range batch.recs {
				if rec.empty() {
					delete(j.recs, rec.VolumeID)
				} else {
					j.recs[rec.VolumeID] = rec
				}
			}
			j.lines += len(batch.recs)
			if j.lines > 2*len(j.recs)+journalCompactLines {
				err = j.rewrite()
			}
		}
		if err != nil && j.broken == nil {
			j.broken = err
		}
		for _, w := range batch.waiters {
			w <- err
		}
	}
	j.leading = false
	if j.closed {
		j.closeFile()
	}
}

// write appends data to the journal and syncs it.
func (j *nodeJournal) write(data []byte) error {
	if _, err := j.f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", j.path, err)
	}
	j.syncs.Add(1)
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", j.path, err)
	}
	return nil
}

// rewrite replaces the journal with one line per record: written and
// synced aside, renamed into place, the directory synced. A reader in
// another process keeps reading the file it opened, which is whole.
func (j *nodeJournal) rewrite() error {
	var data []byte
	var err error
	for _, rec := range j.recs {
		if data, err = encodeJournalLine(data, rec); err != nil {
			return err
		}
	}
	spare := spareOf(j.path)
	f, err := os.OpenFile(spare, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("rewrite %s: %w", j.path, err)
	}
	_, werr := f.Write(data)
	j.syncs.Add(2) // the file's and its directory's
	if err := errors.Join(werr, f.Sync(), os.Rename(spare, j.path), syncDir(filepath.Dir(j.path))); err != nil {
		_ = f.Close()
		return fmt.Errorf("rewrite %s: %w", j.path, err)
	}
	if j.f != nil {
		_ = j.f.Close()
	}
	j.f, j.lines = f, len(j.recs)
	return nil
}

// close refuses later saves and closes the journal's file once no
// writer leads.
func (j *nodeJournal) close() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.closed = true
	if !j.leading {
		j.closeFile()
	}
}

func (j *nodeJournal) closeFile() {
	if j.f != nil {
		_ = j.f.Close()
		j.f = nil
	}
}
