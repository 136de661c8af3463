package storage

import (
	"time"

	bolt "go.etcd.io/bbolt"
)

// CheckPages runs the page check of OpenBolt on the file at path, for the
// benchmark that weighs it against the whole open.
func CheckPages(path string) error {
	db, err := openBolt(path, &bolt.Options{ReadOnly: true, Timeout: time.Second}, time.Second)
	if err != nil {
		return err
	}
	defer func() { _ = db.Close() }()
	return checkPages(db)
}
