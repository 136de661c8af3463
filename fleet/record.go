package fleet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/errclass"
	"google.golang.org/protobuf/proto"
)

// A record in etcd, without a keyring, is a 4-byte CRC32C (Castagnoli,
// big-endian) followed by the protobuf bytes; with one, it is sealed
// (keyring.go). The checksum covers the key too (its length, then
// the key, then the bytes), so a flipped bit, or a record copied under
// another key, fails it: that is corruption, never a value to act on.

const sumLen = 4

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// errCorruptRecord is the cause of every record that does not decode.
var errCorruptRecord = errclass.New(errclass.Corrupt, "record corrupt")

func recordSum(key string, body []byte) uint32 {
	var n [binary.MaxVarintLen64]byte
	sum := crc32.Update(0, crc32c, n[:binary.PutUvarint(n[:], uint64(len(key)))])
	sum = crc32.Update(sum, crc32c, []byte(key))
	return crc32.Update(sum, crc32c, body)
}

// codec encodes and decodes the fleet's records: sealed with the
// keyring's primary key when the Store has a keyring (keyring.go), else
// checksummed.
type codec struct {
	keyring *Keyring
	// acceptPlain lets a codec with a keyring read checksummed records
	// too, while a fleet moves to a keyring (Config.AcceptUnsealed).
	acceptPlain bool
}

// ErrUnsealed is returned for a record that is not sealed with the
// fleet's keyring while the Store has one: something other than an agent
// of the fleet wrote it. It matches model.ErrCorrupt.
var ErrUnsealed = errclass.New(errclass.Corrupt, "record not sealed with the fleet's keyring")

// encode seals m as the value of key.
func (c codec) encode(key string, m proto.Message) (string, error) {
	body, err := proto.Marshal(m)
	if err != nil {
		return "", model.Refusef(model.ErrInvalid, "%s cannot be stored: %v", key, err)
	}
	if c.keyring != nil {
		return string(c.keyring.seal(key, body)), nil
	}
	out := make([]byte, sumLen, sumLen+len(body))
	binary.BigEndian.PutUint32(out, recordSum(key, body))
	return string(append(out, body...)), nil
}

// decode opens the value of key, checks it, and decodes it into m. A bad
// record is an error matching model.ErrCorrupt that names the key; a
// record not sealed while the codec has a keyring also matches
// ErrUnsealed.
func (c codec) decode(key string, value []byte, m proto.Message) error {
	var body []byte
	switch {
	case sealed(value) && c.keyring == nil:
		return corrupt(key, errors.New("it is sealed with a keyring, which this agent lacks: give it the fleet's keyring file (-cluster-keyring)"))
	case sealed(value):
		var err error
		if body, _, err = c.keyring.open(key, value); err != nil {
			return fmt.Errorf("%w: %w", ErrUnsealed, corrupt(key, err))
		}
	case c.keyring != nil && !c.acceptPlain:
		return fmt.Errorf("%w: %w", ErrUnsealed, corrupt(key, errors.New("it is not sealed with the fleet's keyring: something other than an agent of this fleet wrote it, or it was written before the keyring (then run plugvisor keyring rotate)")))
	default:
		if len(value) < sumLen {
			return corrupt(key, fmt.Errorf("the value is %d bytes, shorter than its checksum", len(value)))
		}
		body = value[sumLen:]
		if want, got := binary.BigEndian.Uint32(value), recordSum(key, body); want != got {
			return corrupt(key, fmt.Errorf("checksum mismatch: stored %08x, computed %08x", want, got))
		}
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
