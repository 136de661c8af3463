package fleet

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
)

// update reads the volume (nil when absent) with its health, asks change
// for what to write (the same pointer: nothing; nil: delete), and writes it
// in a transaction that compares the record's mod revision with the one
// read, the index entries it reads (indexWrite) and the guards that
// guard, when given, returns for what is to be written. On a lost race the
// same transaction reads the volume again; update pauses a little (see
// backOff) and retries on what it read, at most MaxAttempts times and
// within the request timeout; then it gives up with
// model.ErrStore, never model.ErrFleetUnavailable: etcd
// answered. It returns what it wrote, with etcd's revisions as indexes.
func (s *Store) update(ctx context.Context, what, ns, id string,
	change func(*model.CSIVolume) (*model.CSIVolume, error), guard guardFunc) (*model.CSIVolume, error) {
	return s.updateSeeing(ctx, what, ns, id, func(v *model.CSIVolume, _ sideRead) (*model.CSIVolume, error) { return change(v) }, guard, via{})
}

// via is how an update reads the volume: from the cache of its one writer
// first (nil: none), and with the drain key of the node drainOf ("":
// none), for a claim.
type via struct {
	cache   *VolumeCache
	drainOf string
}

// updateSeeing is update whose change also sees what was read with the
// record (sideRead), and that reads as how says. A change that starts
// from how.cache and loses (another writer wrote since) is no lost race:
// it goes on at once with what its transaction read.
func (s *Store) updateSeeing(ctx context.Context, what, ns, id string,
	change func(*model.CSIVolume, sideRead) (*model.CSIVolume, error), guard guardFunc, how via) (*model.CSIVolume, error) {
	var out *model.CSIVolume
	err := s.call(ctx, what, func(ctx context.Context) error {
		st, races := how.cache.take(ns, id), 0
		for {
			var err error
			if st == nil {
				st, err = s.readState(ctx, ns, id, how.drainOf)
			}
			var after *state
			won := false
			if err == nil {
				out, after, won, err = s.try(ctx, ns, id, st, change, guard, how.drainOf)
			}
			var u *unreached
			if races > 0 && errors.As(err, &u) && !u.sent && ctx.Err() != nil {
				// etcd answered the attempts before: the time went on
				// lost races, not on an etcd that is away.
				return s.lostRaces(what, ns, id, races)
			}
			if err != nil || won {
				how.cache.keep(ns, id, after)
				return err
			}
			if !st.cached {
				races++
				if races >= s.cfg.MaxAttempts || backOff(ctx, races) != nil {
					return s.lostRaces(what, ns, id, races)
				}
			}
			st = after
		}
	})
	return out, err
}

// lostRaces is the error of a write that lost the race for its volume
// times times in a row, until its attempts or its time ran out.
func (s *Store) lostRaces(what, ns, id string, times int) error {
	return model.Refusef(model.ErrStore, "%s of volume %s/%s lost the race to other writers %d times in a row (limits: %d attempts, Config.MaxAttempts, within %v, Config.RequestTimeout); try again",
		what, ns, id, times, s.cfg.MaxAttempts, s.cfg.RequestTimeout)
}

// state is what an attempt at a volume starts from: the record (nil when
// absent), its mod revision (0 when absent), what was read with it, and
// whether it came from a VolumeCache rather than a read of this update.
type state struct {
	v      *model.CSIVolume
	rev    int64
	seen   sideRead
	cached bool
}

// sideRead is what an attempt read with the volume's record: the
// fingerprints of its plugin, decoded (plugin, nil when it has none) and
// as read (fps, for their mod revisions), and, for a claim, the drain key
// of the claim's node (drain, nil when absent), when it was read
// (drainRead: a state from a cache never read it).
type sideRead struct {
	plugin    *model.CSIPlugin
	fps       []*mvccpb.KeyValue
	drain     *mvccpb.KeyValue
	drainRead bool
}

// modRevision is the mod revision of the fingerprint at key as read, 0
// when it was absent.
func (r sideRead) modRevision(key string) int64 {
	for _, kv := range r.fps {
		if string(kv.Key) == key {
			return kv.ModRevision
		}
	}
	return 0
}

// try is one change and compare-and-write of update, from st. It reports
// whether it is done (won: the write won, nothing was to write, or the
// change refused), with out set; a change that refuses, or has nothing
// to write, on a cached state is not done: the volume is read again (after
// nil). A write that loses returns, as after, the volume as its
// transaction read it when it lost. After a win, after is the state as
// written, for the cache.
func (s *Store) try(ctx context.Context, ns, id string, st *state, change func(*model.CSIVolume, sideRead) (*model.CSIVolume, error),
	guard guardFunc, drainOf string) (out *model.CSIVolume, after *state, won bool, err error) {
	next, err := change(st.v, st.seen)
	if err != nil || next == st.v {
		if st.cached {
			return nil, nil, false, nil
		}
		return next, st, true, err
	}
	key := s.keys.volume(ns, id)
	guards, writes, err := s.indexWrite(ctx, st.v, next)
	if err != nil {
		return nil, nil, false, err
	}
	if guard != nil && next != nil {
		more, err := guard(ctx, next)
		if err != nil {
			return nil, nil, false, err
		}
		guards = append(guards, more...)
	}
	write := clientv3.OpDelete(key)
	if next != nil {
		value, err := s.codec.encode(key, next.Proto())
		if err != nil {
			return nil, nil, false, err
		}
		write = clientv3.OpPut(key, value)
	}
	ops := append(append(writes, write), s.indexOps(ns, id, st.v, next)...)
	if next != nil {
		ops = append(ops, clientv3.OpGet(s.keys.pluginFingerprints(next.PluginID), clientv3.WithPrefix()))
	}
	guess := s.lastPlugin.Load()
	if st.v != nil {
		guess = &st.v.PluginID
	}
	reads := s.stateReads(ns, id, drainOf, guess)
	abandoned, tombstone := s.requestGuard(ctx)
	if tombstone != nil {
		guards, reads = append(guards, abandoned...), append([]clientv3.Op{*tombstone}, reads...)
	}
	txnCtx, failed := sending(ctx)
	resp, err := s.client.Txn(txnCtx).If(append(guards, clientv3.Compare(clientv3.ModRevision(key), "=", st.rev))...).
		Then(ops...).Else(reads...).Commit()
	if err != nil {
		return nil, nil, false, failed(err)
	}
	if !resp.Succeeded {
		rs := resp.Responses
		if tombstone != nil {
			if rs[0].GetResponseRange().GetCount() > 0 {
				return nil, nil, false, ErrRequestAbandoned
			}
			rs = rs[1:]
		}
		after, err := s.stateFrom(ctx, drainOf, guess, rs)
		return nil, after, false, err
	}
	if next == nil {
		return nil, nil, true, nil
	}
	next = next.Copy()
	next.ModifyIndex = uint64(resp.Header.Revision)
	if st.v == nil {
		next.CreateIndex = next.ModifyIndex
	}
	after = &state{v: next, rev: resp.Header.Revision}
	after.seen.fps = resp.Responses[len(resp.Responses)-1].GetResponseRange().GetKvs()
	if after.seen.plugin, err = s.pluginOf(next.PluginID, after.seen.fps); err != nil {
		return nil, nil, false, err
	}
	next.Health = model.HealthOf(next, after.seen.plugin)
	return next, after, true, nil
}

// guardFunc checks what is about to be written and returns the compares
// that must hold for the write.
type guardFunc func(ctx context.Context, next *model.CSIVolume) ([]clientv3.Cmp, error)

// maxBackOff bounds the pause between two attempts at a volume.
const maxBackOff = 50 * time.Millisecond

// backOff pauses before attempt (>0): a random time up
// to 2^attempt milliseconds, at most maxBackOff (full jitter), so that
// writers who keep colliding on one volume spread out.
func backOff(ctx context.Context, attempt int) error {
	return sleep(ctx, rand.N(min(time.Millisecond<<min(attempt, 16), maxBackOff)))
}

// readVolume reads a volume and the fingerprints of its plugin only
// (their copies under pluginfingerprints/<plugin>/), and returns the
// volume (nil when absent) with its health following its plugin's counts,
// and the record's mod revision (0 when absent). It reads the
// fingerprints of lastPlugin in the record's round trip; when the volume
// is another plugin's, it reads that plugin's just after.
func (s *Store) readVolume(ctx context.Context, ns, id string) (*model.CSIVolume, int64, error) {
	st, err := s.readState(ctx, ns, id, "")
	if err != nil {
		return nil, 0, err
	}
	return st.v, st.rev, nil
}

// readState reads the state of volume ns/id in one round trip (two when
// the volume is not lastPlugin's): see stateReads.
func (s *Store) readState(ctx context.Context, ns, id, drainOf string) (*state, error) {
	guess := s.lastPlugin.Load()
	resp, err := s.client.Txn(ctx).Then(s.stateReads(ns, id, drainOf, guess)...).Commit()
	if err != nil {
		return nil, etcdErr(err)
	}
	return s.stateFrom(ctx, drainOf, guess, resp.Responses)
}

// stateReads are the reads of the state of volume ns/id: its record, the
// drain key of node drainOf (when not ""), and the fingerprints of plugin
// (when not nil), the plugin the volume is guessed to be of.
func (s *Store) stateReads(ns, id, drainOf string, plugin *string) []clientv3.Op {
	reads := []clientv3.Op{clientv3.OpGet(s.keys.volume(ns, id))}
	if drainOf != "" {
		reads = append(reads, clientv3.OpGet(s.keys.drain(drainOf)))
	}
	if plugin != nil {
		reads = append(reads, clientv3.OpGet(s.keys.pluginFingerprints(*plugin), clientv3.WithPrefix()))
	}
	return reads
}

// stateFrom is the state that the answers rs of stateReads(…, drainOf,
// plugin) hold; when the volume is not plugin's, it reads its plugin's
// fingerprints (and remembers the plugin as lastPlugin).
func (s *Store) stateFrom(ctx context.Context, drainOf string, plugin *string, rs []*etcdserverpb.ResponseOp) (*state, error) {
	st := &state{seen: sideRead{drainRead: drainOf != ""}}
	if drainOf != "" {
		st.seen.drain = firstKV(rs[1].GetResponseRange().GetKvs())
	}
	kv := firstKV(rs[0].GetResponseRange().GetKvs())
	if kv == nil {
		return st, nil
	}
	v, err := s.decodeVolume(kv)
	if err != nil {
		return nil, err
	}
	if plugin != nil && *plugin == v.PluginID {
		st.seen.fps = rs[len(rs)-1].GetResponseRange().GetKvs()
	} else {
		s.lastPlugin.Store(&v.PluginID)
		got, err := s.client.Get(ctx, s.keys.pluginFingerprints(v.PluginID), clientv3.WithPrefix())
		if err != nil {
			return nil, etcdErr(err)
		}
		st.seen.fps = got.Kvs
	}
	if st.seen.plugin, err = s.pluginOf(v.PluginID, st.seen.fps); err != nil {
		return nil, err
	}
	v.Health = model.HealthOf(v, st.seen.plugin)
	st.v, st.rev = v, kv.ModRevision
	return st, nil
}

// pluginOf decodes fps, the fingerprints of plugin: the plugin, nil when
// it has none.
func (s *Store) pluginOf(plugin string, fps []*mvccpb.KeyValue) (*model.CSIPlugin, error) {
	plugins, err := s.decodePlugins(fps, true)
	return plugins[plugin], err
}
