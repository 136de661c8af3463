package fleet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"google.golang.org/protobuf/proto"
)

// A record in etcd is a 4-byte CRC32C (Castagnoli, big-endian) followed by
// the protobuf bytes. The checksum covers the key too (its length, then
// the key, then the bytes), so a flipped bit, or a record copied under
// another key, fails it: that is corruption, never a value to act on.

const sumLen = 4

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// errCorruptRecord is the cause of every record that does not decode.
var errCorruptRecord = errors.New("fleet: record corrupt")

func recordSum(key string, body []byte) uint32 {
	var n [binary.MaxVarintLen64]byte
	sum := crc32.Update(0, crc32c, n[:binary.PutUvarint(n[:], uint64(len(key)))])
	sum = crc32.Update(sum, crc32c, []byte(key))
	return crc32.Update(sum, crc32c, body)
}

// encodeRecord seals m as the value of key.
func encodeRecord(key string, m proto.Message) (string, error) {
	body, err := proto.Marshal(m)
	if err != nil {
		return "", model.Refusef(model.ErrInvalid, "fleet: %s cannot be stored: %v", key, err)
	}
	out := make([]byte, sumLen, sumLen+len(body))
	binary.BigEndian.PutUint32(out, recordSum(key, body))
	return string(append(out, body...)), nil
}

// decodeRecord checks the value of key against its checksum and decodes
// it into m. A bad record is an error matching model.ErrCorrupt
// that names the key.
func decodeRecord(key string, value []byte, m proto.Message) error {
	if len(value) < sumLen {
		return corrupt(key, fmt.Errorf("the value is %d bytes, shorter than its checksum", len(value)))
	}
	body := value[sumLen:]
	if want, got := binary.BigEndian.Uint32(value), recordSum(key, body); want != got {
		return corrupt(key, fmt.Errorf("checksum mismatch: stored %08x, computed %08x", want, got))
	}
	if err := proto.Unmarshal(body, m); err != nil {
		return corrupt(key, err)
	}
	return nil
}

// corrupt is the error of a record under key that cannot be used.
func corrupt(key string, cause error) error {
	return fmt.Errorf("%w: %w: etcd key %q: %w; delete the key (etcdctl del %q) or put a good record back, then retry",
		model.ErrCorrupt, errCorruptRecord, key, cause, key)
}
