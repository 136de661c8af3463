package fleet

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Access says how an operator's command reaches the fleet's etcd: its
// client URLs, TLS, and an etcd user when etcd's auth is on (the user
// needs the root role for a snapshot or a defragmentation).
type Access struct {
	Endpoints          []string
	TLS                *tls.Config
	Username, Password string
}

// SaveSnapshot writes a snapshot of the etcd a reaches (the first of its
// endpoints that answers) into path, and returns its
// size: the backup of a fleet, which embedded.Restore (or `etcdutl
// snapshot restore`) turns into a new data directory. It writes
// path.part, syncs it and renames it, so that path is never half a
// snapshot; an existing path is refused.
func SaveSnapshot(ctx context.Context, a Access, path string) (int64, error) {
	if _, err := os.Stat(path); err == nil {
		return 0, fmt.Errorf("snapshot: %s exists: give a new file", path)
	}
	client, err := maintenanceClient(a)
	if err != nil {
		return 0, err
	}
	defer client.Close()
	endpoints := a.Endpoints
	rc, err := client.Snapshot(ctx)
	if err != nil {
		return 0, fmt.Errorf("snapshot of etcd at %s: %w", strings.Join(endpoints, ","), err)
	}
	defer rc.Close()
	part := path + ".part"
	f, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, fmt.Errorf("snapshot: %w", err)
	}
	n, err := io.Copy(f, rc)
	err = errors.Join(err, f.Sync(), f.Close())
	if err == nil {
		err = os.Rename(part, path)
	}
	if err != nil {
		_ = os.Remove(part)
		return 0, fmt.Errorf("snapshot of etcd at %s into %s: %w", strings.Join(endpoints, ","), path, err)
	}
	return n, nil
}

// Defragment defragments the db of each etcd member a reaches, one
// after the other: it returns to the file system the space that
// compaction freed inside the db. A member does not answer while it
// defragments, so do it one member at a time, at a quiet hour.
func Defragment(ctx context.Context, a Access) error {
	client, err := maintenanceClient(a)
	if err != nil {
		return err
	}
	defer client.Close()
	for _, ep := range a.Endpoints {
		if _, err := client.Defragment(ctx, ep); err != nil {
			return fmt.Errorf("defragment etcd at %s: %w", ep, err)
		}
	}
	return nil
}

// DBSize is the size of the db file of the etcd member at a's first
// endpoint, and of the part of it in use.
func DBSize(ctx context.Context, a Access) (size, inUse int64, err error) {
	client, err := maintenanceClient(a)
	if err != nil {
		return 0, 0, err
	}
	defer client.Close()
	endpoint := a.Endpoints[0]
	st, err := client.Status(ctx, endpoint)
	if err != nil {
		return 0, 0, fmt.Errorf("status of etcd at %s: %w", endpoint, err)
	}
	return st.DbSize, st.DbSizeInUse, nil
}

// maintenanceClient is a client of the etcd a reaches.
func maintenanceClient(a Access) (*clientv3.Client, error) {
	if len(a.Endpoints) == 0 {
		return nil, errors.New("no etcd endpoints: give the etcd client URLs, e.g. https://127.0.0.1:2379")
	}
	client, err := clientv3.New(clientv3.Config{Endpoints: a.Endpoints, TLS: a.TLS, Username: a.Username, Password: a.Password,
		DialTimeout: DefaultRequestTimeout, Logger: zap.NewNop()})
	if err == nil {
		// A status call within the dial timeout makes an etcd that refuses
		// the handshake (no client certificate, another CA) fail the
		// command now, not at the command's -timeout.
		ctx, cancel := context.WithTimeout(context.Background(), DefaultRequestTimeout)
		_, err = client.Status(ctx, a.Endpoints[0])
		cancel()
		if err != nil {
			client.Close()
		}
	}
	if err != nil {
		if denied := etcdErr(err); errors.Is(denied, ErrEtcdDenied) {
			err = denied
		}
		return nil, fmt.Errorf("connect to etcd at %s: %w", strings.Join(a.Endpoints, ","), err)
	}
	return client, nil
}
