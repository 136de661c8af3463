package storage

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strconv"

	bolt "go.etcd.io/bbolt"

	"github.com/plugvisor/plugvisor/errclass"
)

// The record format of a Bolt file.
//
// Format 2 (this one): every value is sealed: a 4-byte CRC32C (Castagnoli,
// big-endian) followed by the owner's bytes. The checksum covers the bucket
// name, the key and the owner's bytes, so a flipped bit anywhere in a
// record, or a record that turns up under another key or bucket, fails it.
// The file says its format in the bucket formatBucket, key formatKey, as
// decimal text.
//
// Format 1 (before checksums): values are stored as they are, and the file
// has no formatBucket. OpenBolt upgrades such a file when it opens it for
// writing: it seals every record and records the format in one transaction,
// so the file is either all format 1 or all format 2. A file of a format
// newer than this code knows is refused, never rewritten.
const (
	// formatBucket holds the file's format. Its NUL keeps it out of reach of
	// Store.Bucket, which refuses names with NUL.
	formatBucket = "\x00plugvisor"
	formatKey    = "format"
	// formatUnsealed is the format of files written before checksums.
	formatUnsealed = 1
	// formatSealed is the format this code writes.
	formatSealed = 2
	// sealLen is what sealing adds to a value, in bytes.
	sealLen = 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errChecksum marks a record whose stored checksum does not match.
var errChecksum = errclass.New(errclass.Corrupt, "checksum mismatch")

// recordSum is the CRC32C of a record: its bucket, key and value, each
// preceded by its length so that no two records share an input.
func recordSum(bucket, key, value []byte) uint32 {
	var n [binary.MaxVarintLen64]byte
	sum := uint32(0)
	for _, part := range [][]byte{bucket, key, value} {
		sum = crc32.Update(sum, castagnoli, n[:binary.PutUvarint(n[:], uint64(len(part)))])
		sum = crc32.Update(sum, castagnoli, part)
	}
	return sum
}

// seal returns value with its checksum in front, as Bolt stores it.
func seal(bucket, key, value []byte) []byte {
	out := make([]byte, sealLen, sealLen+len(value))
	binary.BigEndian.PutUint32(out, recordSum(bucket, key, value))
	return append(out, value...)
}

// unseal checks a stored value against its checksum and returns the owner's
// bytes (a sub-slice of stored).
func unseal(bucket, key, stored []byte) ([]byte, error) {
	if len(stored) < sealLen {
		return nil, fmt.Errorf("bucket %q, record %q: %w: the value is %d bytes, shorter than its checksum",
			bucket, key, errChecksum, len(stored))
	}
	value := stored[sealLen:]
	if want, got := binary.BigEndian.Uint32(stored), recordSum(bucket, key, value); want != got {
		return nil, fmt.Errorf("bucket %q, record %q: %w: stored %08x, computed %08x",
			bucket, key, errChecksum, want, got)
	}
	return value, nil
}

// readFormat returns the format of the file tx reads.
func readFormat(tx *bolt.Tx) (int, error) {
	b := tx.Bucket([]byte(formatBucket))
	if b == nil {
		return formatUnsealed, nil
	}
	v := b.Get([]byte(formatKey))
	format, err := strconv.Atoi(string(v))
	switch {
	case err != nil || format < formatSealed:
		return 0, fmt.Errorf("the format record %q is not a known format", v)
	case format > formatSealed:
		return 0, fmt.Errorf("%w: %s was written in format %d by a newer plugvisor; this one reads formats up to %d: run the newer agent",
			errNewerFormat, b.Tx().DB().Path(), format, formatSealed)
	}
	return format, nil
}

// errNewerFormat is a file this code must not touch; it is not corrupt.
var errNewerFormat = errclass.New(errclass.Unsupported, "state file is from a newer version")

// verify checks the checksum of every record of a sealed file; an unsealed
// file has none to check.
func verify(tx *bolt.Tx) error {
	format, err := readFormat(tx)
	if err != nil || format == formatUnsealed {
		return err
	}
	return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
		if string(name) == formatBucket {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			if v == nil {
				return nil // a nested bucket: walk has checked it
			}
			_, err := unseal(name, k, v)
			return err
		})
	})
}

// upgrade seals every record of an unsealed file and records the format, in
// one transaction; a sealed file is left alone.
func upgrade(db *bolt.DB) error {
	return db.Update(func(tx *bolt.Tx) error {
		format, err := readFormat(tx)
		if err != nil || format == formatSealed {
			return err
		}
		type record struct{ bucket, key, value []byte }
		var records []record
		err = tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			return b.ForEach(func(k, v []byte) error {
				if v != nil {
					records = append(records, record{bytes.Clone(name), bytes.Clone(k), seal(name, k, v)})
				}
				return nil
			})
		})
		if err != nil {
			return err
		}
		for _, r := range records {
			if err := tx.Bucket(r.bucket).Put(r.key, r.value); err != nil {
				return fmt.Errorf("seal bucket %q, record %q: %w", r.bucket, r.key, err)
			}
		}
		meta, err := tx.CreateBucketIfNotExists([]byte(formatBucket))
		if err != nil {
			return err
		}
		return meta.Put([]byte(formatKey), []byte(strconv.Itoa(formatSealed)))
	})
}

// CorruptRecord reports a record that its owner cannot use (it does not
// decode, or fails the owner's validation) as corruption of the store: the
// error matches ErrCorrupt, names the bucket and key, and says what the
// operator can do. Owners return it from their Load functions, so that every
// kind of bad record has the one remedy.
func CorruptRecord(bucket string, key []byte, cause error) error {
	return fmt.Errorf("%w: bucket %q, record %q: %w; %s", ErrCorrupt, bucket, printableKey(key), cause, remedy)
}

// remedy is what every corruption error tells the operator.
const remedy = "restart the agent with -reset-corrupt-state (BoltOptions.MoveAsideCorrupt) to move the state file aside to <file>.corrupt-<time> and start with an empty store"

// printableKey shows a key whose parts are joined by NUL.
func printableKey(key []byte) string {
	return string(bytes.ReplaceAll(key, []byte{0}, []byte{'/'}))
}
