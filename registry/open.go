package registry

import (
	"errors"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/storage"
)

// OpenOptions configure Open.
type OpenOptions struct {
	// Config configures the registry, as for New. Leave its Bucket nil:
	// Open makes it from the file.
	Config Config
	// Store says how the file opens (its lock timeout, what to do with a
	// corrupt file). Its Logger defaults to Config.Logger.
	Store storage.BoltOptions
}

// Open opens the bbolt file at path (creating it; its directory must
// exist), starts an actor system and a registry on it, and returns the
// registry. Close stops all three. It is the one call for a program that
// embeds a registry alone; a program that shares the file or the actor
// system with other parts opens them itself and calls New.
func Open(path string, opts OpenOptions) (*Registry, error) {
	if opts.Config.Bucket != nil {
		return nil, fmt.Errorf("%w: OpenOptions.Config.Bucket must be nil: Open makes the bucket from %s (use New to bring your own)", ErrInvalid, path)
	}
	if opts.Store.Logger == nil {
		opts.Store.Logger = opts.Config.Logger
	}
	store, err := storage.OpenBolt(path, opts.Store)
	if err != nil {
		return nil, err // it names the file
	}
	bucket, err := store.Bucket(BucketName)
	if err != nil {
		return nil, errors.Join(err, store.Close())
	}
	opts.Config.Bucket = bucket
	system := actors.NewSystem(opts.Config.Logger)
	r, err := New(system, opts.Config)
	if err != nil {
		system.Shutdown()
		return nil, errors.Join(err, store.Close())
	}
	r.owned = func() error {
		system.Shutdown()
		return store.Close()
	}
	return r, nil
}

// System is the actor system the registry runs in: the one given to New,
// or the one Open started. Spawn the actors that subscribe to the registry
// at PID in it.
func (r *Registry) System() *actor.ActorSystem { return r.system }

// Close shuts the registry down (see Shutdown) and, for a registry from
// Open, then shuts down its actor system and closes its file, releasing
// the file's lock. For a registry from New, whose caller owns the system
// and the store, it is Shutdown. A second call returns nil.
//
// Close does not wait for the readers of channel subscriptions: each
// channel closes once its reader has taken the events delivered before
// the shutdown, or when its context ends.
func (r *Registry) Close() error {
	err := r.Shutdown()
	r.closeOwned.Do(func() {
		if r.owned != nil {
			err = errors.Join(err, r.owned())
		}
	})
	return err
}
