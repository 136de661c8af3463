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

// SaveSnapshot writes a snapshot of the etcd at endpoints (the first that
// answers; tlsConfig, when set, to reach it) into path, and returns its
// size: the backup of a fleet, which embedded.Restore (or `etcdutl
// snapshot restore`) turns into a new data directory. It writes
// path.part, syncs it and renames it, so that path is never half a
// snapshot; an existing path is refused.
func SaveSnapshot(ctx context.Context, endpoints []string, tlsConfig *tls.Config, path string) (int64, error) {
	if _, err := os.Stat(path); err == nil {
		return 0, fmt.Errorf("snapshot: %s exists: give a new file", path)
	}
	client, err := maintenanceClient(endpoints, tlsConfig)
	if err != nil {
		return 0, err
	}
	defer client.Close()
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

// Defragment defragments the db of each etcd member at endpoints, one
// after the other: it returns to the file system the space that
// compaction freed inside the db. A member does not answer while it
// defragments, so do it one member at a time, at a quiet hour.
func Defragment(ctx context.Context, endpoints []string, tlsConfig *tls.Config) error {
	client, err := maintenanceClient(endpoints, tlsConfig)
	if err != nil {
		return err
	}
	defer client.Close()
	for _, ep := range endpoints {
		if _, err := client.Defragment(ctx, ep); err != nil {
			return fmt.Errorf("defragment etcd at %s: %w", ep, err)
		}
	}
	return nil
}

// DBSize is the size of the db file of the etcd member at endpoint, and
// of the part of it in use.
func DBSize(ctx context.Context, endpoint string, tlsConfig *tls.Config) (size, inUse int64, err error) {
	client, err := maintenanceClient([]string{endpoint}, tlsConfig)
	if err != nil {
		return 0, 0, err
	}
	defer client.Close()
	st, err := client.Status(ctx, endpoint)
	if err != nil {
		return 0, 0, fmt.Errorf("status of etcd at %s: %w", endpoint, err)
	}
	return st.DbSize, st.DbSizeInUse, nil
}

func maintenanceClient(endpoints []string, tlsConfig *tls.Config) (*clientv3.Client, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("no etcd endpoints: give the etcd client URLs, e.g. http://127.0.0.1:2379")
	}
	client, err := clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: tlsConfig, DialTimeout: DefaultRequestTimeout, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("connect to etcd at %s: %w", strings.Join(endpoints, ","), err)
	}
	return client, nil
}
