package fleet

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/errclass"
)

// A change sent through a volume's grain (package fleet/member) carries
// the ID of its request, the same in every attempt. When its sender gives
// up waiting for an answer, it writes a tombstone under that ID
// (AbandonRequest), and every transaction of the request holds only while
// no tombstone of it exists. So once the tombstone is written, the request
// can never commit, and a read of the volume tells its sender for sure
// whether it did before: an unknown outcome is resolved, never reported
// as a refusal.

// ErrRequestAbandoned is returned for a change whose sender gave up on it
// (AbandonRequest) before it could commit: it was not applied. Its
// sender no longer waits for the answer.
var ErrRequestAbandoned = errclass.New(errclass.Unavailable, "request abandoned by its sender")

// tombstoneTTL is how long a tombstone lasts: far longer than a request
// can wait in a grain's queue or on the wire.
const tombstoneTTL = 15 * time.Minute

func (k keys) request(id string) string { return k.prefix + "requests/" + id }

type requestKey struct{}

// WithRequest returns ctx carrying the ID of the request whose change the
// Store's calls with it make: each of their transactions holds only while
// the request is not abandoned (AbandonRequest). An empty ID is none.
func WithRequest(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	return context.WithValue(ctx, requestKey{}, id)
}

// requestGuard is the compare that keeps a change of ctx's request from
// committing once its sender abandoned it, and the read that tells a
// failed transaction so; both nil without a request.
func (s *Store) requestGuard(ctx context.Context) ([]clientv3.Cmp, *clientv3.Op) {
	id, _ := ctx.Value(requestKey{}).(string)
	if id == "" {
		return nil, nil
	}
	key := s.keys.request(id)
	read := clientv3.OpGet(key, clientv3.WithCountOnly())
	return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)}, &read
}

// AbandonRequest writes the tombstone of request id, under a lease of its
// own: from then on no transaction of the request commits. It returns
// nil once the tombstone is there, written now or before.
func (s *Store) AbandonRequest(ctx context.Context, id string) error {
	return s.call(ctx, "abandon a request", func(ctx context.Context) error {
		lease, err := s.client.Grant(ctx, int64(tombstoneTTL/time.Second))
		if err != nil {
			return etcdErr(err)
		}
		key := s.keys.request(id)
		_, err = s.client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, "abandoned", clientv3.WithLease(lease.ID))).Commit()
		return etcdErr(err)
	})
}
