package volumes

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"maps"
	"time"

	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/storage"
)

// Bucket is the store bucket of the Docker volume service.
const Bucket = "docker-volumes"

// ErrCorruptRecord: a record in the store fails its checksum or does not
// decode; the service refuses to start rather than guess what is mounted.
var ErrCorruptRecord = errclass.New(errclass.Corrupt, "corrupt volume record")

// record is the durable state of one volume: which driver serves it, and
// who has it mounted. It is plain data; the service actor owns one copy of
// each, and its operations work on clones.
type record struct {
	Name      string            `json:"name"`
	Driver    string            `json:"driver"`
	Options   map[string]string `json:"options,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	// Mounts are by mount ID.
	Mounts map[string]*mountRecord `json:"mounts,omitempty"`
}

// mountRecord is one mount ID's use of a volume.
type mountRecord struct {
	// Count is how many times the ID mounted the volume and has not
	// unmounted it; the plugin hears of the first mount and the last unmount.
	Count int `json:"count"`
	// Pending is set while the plugin's Mount is under way (written before
	// the call): after a crash it says the plugin may hold a mount that the
	// record never confirmed. Unmount clears it.
	Pending    bool   `json:"pending,omitempty"`
	Mountpoint string `json:"mountpoint,omitempty"`
}

func (r *record) clone() *record {
	if r == nil {
		return nil
	}
	c := *r
	c.Options, c.Labels = maps.Clone(r.Options), maps.Clone(r.Labels)
	c.Mounts = make(map[string]*mountRecord, len(r.Mounts))
	for id, m := range r.Mounts {
		mc := *m
		c.Mounts[id] = &mc
	}
	return &c
}

// inUse reports whether any mount ID holds the volume, or may hold it.
func (r *record) inUse() bool { return len(r.Mounts) > 0 }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func recordKey(name string) []byte { return []byte("volume/" + name) }

// encode returns the CRC32C of the JSON, big-endian, then the JSON.
func (r *record) encode() ([]byte, error) {
	body, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode volume %q: %w", r.Name, err)
	}
	out := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(body)), crc32.Checksum(body, castagnoli))
	return append(out, body...), nil
}

func decodeRecord(key, value []byte) (*record, error) {
	if len(value) < 4 || binary.BigEndian.Uint32(value) != crc32.Checksum(value[4:], castagnoli) {
		return nil, fmt.Errorf("%w: %s: checksum mismatch", ErrCorruptRecord, key)
	}
	var r record
	if err := json.Unmarshal(value[4:], &r); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrCorruptRecord, key, err)
	}
	if string(recordKey(r.Name)) != string(key) {
		return nil, fmt.Errorf("%w: %s holds volume %q", ErrCorruptRecord, key, r.Name)
	}
	if r.Mounts == nil {
		r.Mounts = map[string]*mountRecord{}
	}
	return &r, nil
}

// loadRecords reads every volume record in bucket.
func loadRecords(bucket storage.Bucket) (map[string]*record, error) {
	out := map[string]*record{}
	err := bucket.Load(func(key, value []byte) error {
		r, err := decodeRecord(key, value)
		if err != nil {
			return err
		}
		out[r.Name] = r
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load volume records: %w", err)
	}
	return out, nil
}

// save writes r durably, or deletes the volume's record when r has no driver.
func save(bucket storage.Bucket, name string, r *record) error {
	op := storage.Delete(recordKey(name))
	if r != nil {
		value, err := r.encode()
		if err != nil {
			return err
		}
		op = storage.Put(recordKey(name), value)
	}
	if err := bucket.Apply([]storage.Op{op}); err != nil {
		return fmt.Errorf("%w: volume %q: %w", ErrStore, name, err)
	}
	return nil
}
