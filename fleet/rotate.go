package fleet

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/errclass"
)

// RotateResult counts what RotateRecords did.
type RotateResult struct {
	// Sealed were sealed with the primary key already; Resealed were
	// sealed again with it (sealed with an older key, or checksummed);
	// Skipped are keys that hold no record (the node index, drains,
	// elections, the members' keys).
	Sealed, Resealed, Skipped int
}

// RotateRecords seals every record of the fleet under prefix (default
// DefaultPrefix) again with keyring's primary key: those an older key of
// the keyring sealed, and the checksummed records of a fleet that had no
// keyring. Each is written in a transaction that holds only while the
// record is as read, keeping its lease; a record written meanwhile by an
// agent is sealed with the primary already, or is read again. A record
// that opens with no key of the keyring stops the rotation, naming it.
// Once it returns, the older keys can leave the keyring file, and agents
// need not accept unsealed records any more.
func RotateRecords(ctx context.Context, a Access, prefix string, keyring *Keyring) (RotateResult, error) {
	var res RotateResult
	if keyring == nil {
		return res, fmt.Errorf("%w: no keyring to rotate to", ErrKeyring)
	}
	if prefix == "" {
		prefix = DefaultPrefix
	}
	client, err := maintenanceClient(a)
	if err != nil {
		return res, err
	}
	defer client.Close()
	c := codec{keyring: keyring, acceptPlain: true}
	for from := prefix; ; {
		resp, err := client.Get(ctx, from, clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix)), clientv3.WithLimit(500))
		if err != nil {
			return res, fmt.Errorf("rotate: read %s: %w", from, err)
		}
		for _, kv := range resp.Kvs {
			key := string(kv.Key)
			body, id, err := c.body(key, kv.Value)
			switch {
			case errors.Is(err, errNoRecord):
				res.Skipped++
				continue
			case err != nil:
				return res, err
			case id == keyring.Primary():
				res.Sealed++
				continue
			}
			txn, err := client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
				Then(clientv3.OpPut(key, string(keyring.seal(key, body)), clientv3.WithIgnoreLease())).Commit()
			if err != nil {
				return res, fmt.Errorf("rotate: write %s: %w", key, err)
			}
			if txn.Succeeded {
				res.Resealed++
			} else {
				res.Sealed++ // an agent wrote it meanwhile, with the primary key
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return res, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// errNoRecord: a value is neither sealed nor a checksummed record.
var errNoRecord = errclass.New(errclass.Corrupt, "not a record")

// body is the protobuf bytes of the record value of key holds, and the ID
// of the key that sealed it ("" for a checksummed record); a value that is
// no record is errNoRecord.
func (c codec) body(key string, value []byte) ([]byte, string, error) {
	if sealed(value) {
		body, id, err := c.keyring.open(key, value)
		if err != nil {
			return nil, id, fmt.Errorf("%w: %w", ErrUnsealed, corrupt(key, err))
		}
		return body, id, nil
	}
	if len(value) < sumLen || recordSum(key, value[sumLen:]) != uint32(value[0])<<24|uint32(value[1])<<16|uint32(value[2])<<8|uint32(value[3]) {
		return nil, "", errNoRecord
	}
	return value[sumLen:], "", nil
}
