package volumes

import (
	"context"
	"errors"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
)

// In cluster mode, a node's mounts follow the fleet's claims continuously:
// the node's watch of its claim index (fleet's Store.WatchNode) tells the
// manager, through ClaimsChanged, which allocs of the node claim a volume
// after each change, and, through Resync, when every mount must be checked
// again. Whoever freed a claim (the GC, a drain -force, an operator, a
// restore of etcd), the publish of its alloc is made read-only at once
// and then taken down through the plugin's way out (claimGone).

// claimsChanged is sent by ClaimsChanged to the manager.
type claimsChanged struct{ claims model.NodeClaims }

// resyncAsked is sent by Resync to the manager.
type resyncAsked struct{ reason string }

// ClaimsChanged tells the manager which allocs of this node claim a volume
// now, as the node's watch of the fleet's claim index saw it. A publish of
// the volume whose alloc is not among them loses its claim: a writer's
// target is remounted read-only at once, without waiting behind the
// volume's queue, and a reconcile of the volume takes it down.
func (m *Manager) ClaimsChanged(c model.NodeClaims) {
	m.system.Root.Send(m.pid, &claimsChanged{claims: c})
}

// Resync makes the manager check every volume with a record against the
// fleet's claims again (a reconcile each), because the node's watch may
// have missed a change: it started, was compacted or cancelled, or found
// etcd restored. A mount of a volume waits behind its reconcile. A writer
// of a volume whose queue is busy is checked at once as well, off the
// queue: a reconcile waiting behind a long operation (a mount waiting for
// the fleet) would leave a mount whose claim is gone writable meanwhile.
// reason is logged.
func (m *Manager) Resync(reason string) {
	m.system.Root.Send(m.pid, &resyncAsked{reason: reason})
}

// onClaimsChanged fences and queues a reconcile of the volume when a
// publish of it lost its claim. A publish still being claimed (its mount
// on the way in, its claim taken) is not mounted yet: the reconcile,
// queued behind its mount, takes down what the mount put up.
func (m *manager) onClaimsChanged(ctx actor.Context, c model.NodeClaims) {
	key := volumeKey{c.Namespace, c.VolumeID}
	rec, ok := m.records[key]
	if !ok || m.closing {
		return
	}
	var gone []*messages.VolumePublish
	lost := !c.Known
	for _, alloc := range publishedAllocs(rec) {
		if c.Holds(alloc) {
			continue
		}
		lost = true
		if pub := rec.GetPublishes()[alloc]; mayBeMounted(pub) {
			gone = append(gone, pub)
		}
	}
	if !lost {
		return
	}
	m.doubt(key)
	var targets []string
	for _, pub := range gone {
		m.log.Warn("the fleet no longer gives this alloc's claim to this node: its mount is made read-only and taken down",
			"namespace", key.namespace, "volume_id", key.id, "alloc_id", pub.GetAllocId(), "target_path", pub.GetTargetPath(), "claims_now", c.Allocs)
		if mayBeWritable(pub) {
			targets = append(targets, pub.GetTargetPath())
		}
	}
	m.remountReadOnly(targets)
	m.forgetRetry(key)
	m.enqueue(ctx, &op{kind: opReconcile, key: key})
}

// doubt tells the job running on the volume, if any, that the fleet's
// claims of it changed in a way that may have freed its alloc's: a mount
// then checks its claim before it answers (job.claimKept).
func (m *manager) doubt(key volumeKey) {
	if q, ok := m.queues[key]; ok {
		q.doubts.Add(1)
	}
}

// onResync queues a reconcile of every volume with a record.
func (m *manager) onResync(ctx actor.Context, reason string) {
	if m.closing {
		return
	}
	m.log.Info("checking every mount against the fleet's claims", "why", reason, "volumes", len(m.records))
	for key := range m.records {
		m.forgetRetry(key)
	}
	for key := range m.queues {
		m.doubt(key)
	}
	m.checkBusyWriters()
	m.reconcileAll(ctx)
}

// busyWriters are the writers' targets (by alloc) of a volume whose queue
// is busy, for checkBusyWriters.
type busyWriters struct {
	key     volumeKey
	targets map[string]string
}

// checkBusyWriters reads the claims of each volume that has a writer's
// publish and an operation running, on a goroutine of its own, and makes
// the target of each writer whose claim the fleet no longer gives to this
// node read-only at once, as onClaimsChanged does. The volume's reconcile,
// queued behind the running operation, takes the mount down, or makes it
// writable again when its claim is back. A node whose standing is lost
// fences every writer already.
func (m *manager) checkBusyWriters() {
	if m.env.fenced.Load() {
		return
	}
	var check []busyWriters
	for key, rec := range m.records {
		if !m.busy(key) {
			continue
		}
		w := busyWriters{key: key, targets: map[string]string{}}
		for _, alloc := range publishedAllocs(rec) {
			if pub := rec.GetPublishes()[alloc]; mayBeWritable(pub) {
				w.targets[alloc] = pub.GetTargetPath()
			}
		}
		if len(w.targets) > 0 {
			check = append(check, w)
		}
	}
	if len(check) == 0 {
		return
	}
	env := m.env
	m.workers.Add(1)
	go func() {
		defer m.workers.Done()
		var lost []string
		for _, w := range check {
			ctx, cancel := context.WithTimeout(env.base, env.opTimeout)
			holders, err := readHolders(ctx, env.catalog, w.key)
			cancel()
			if err != nil {
				continue // the reconcile checks again
			}
			for alloc, target := range w.targets {
				if !holdsHere(holders, alloc, env.nodeID) {
					env.log.Warn("the fleet no longer gives this alloc's claim to this node: its mount is made read-only while an operation runs on the volume; the volume's reconcile then takes it down",
						"namespace", w.key.namespace, "volume_id", w.key.id, "alloc_id", alloc, "target_path", target)
					lost = append(lost, target)
				}
			}
		}
		makeReadOnly(env.log, lost)
	}()
}

// remountReadOnly makes each target read-only on a goroutine of its own,
// so that a fence never waits behind a volume's queue. A target that is no
// mount point (EINVAL) is not mounted, so not writable.
func (m *manager) remountReadOnly(targets []string) {
	if len(targets) == 0 {
		return
	}
	m.workers.Add(1)
	go func() {
		defer m.workers.Done()
		makeReadOnly(m.log, targets)
	}()
}

// makeReadOnly remounts each target read-only. A target that is no mount
// point (EINVAL) or is gone (ENOENT) is not writable; any other failure is
// logged, and left to the volume's reconcile.
func makeReadOnly(log hclog.Logger, targets []string) {
	for _, target := range targets {
		if err := remount(target, true); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			log.Warn("could not make a writer's target read-only: its reconcile tries again", "target_path", target, "error", err)
		}
	}
}

// mayBeMounted reports whether pub's target may be mounted: on its way
// in, mounted, or on its way out before its claim is released.
func mayBeMounted(pub *messages.VolumePublish) bool {
	switch pub.GetState() {
	case statePublishing, statePublished, stateUnpublishing:
		return true
	}
	return false
}
