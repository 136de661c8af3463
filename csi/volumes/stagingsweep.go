package volumes

import (
	"os"
	"path/filepath"

	"github.com/asynkron/protoactor-go/actor"
)

// The staging sweep. A volume's staging directory stays after
// NodeUnstageVolume, so that mounting the volume again creates no
// directory and the way out removes none: on a busy node the mkdir and
// rmdir of volumes staged side by side contend on their shared parent, and
// cost more CPU than the rest of the pair. Every SweepInterval the
// manager removes, on its own goroutine, each empty staging directory of a
// volume with no operation running or waiting and no stage at that path in
// its record. Only a job of a volume creates or uses that volume's staging
// directory, and jobs start on the manager's goroutine, so no job can start
// while the sweep runs: a directory a mount is about to use has an
// operation waiting, and one a mount uses has one running (or a stage in
// the record), and both stay. A namespace's directory goes too once empty,
// when no operation of that namespace runs or waits. rmdir removes neither
// a mount point nor a directory with anything in it. The first sweep after
// a start also removes what an earlier run left.
//
// The same sweep removes the empty per-alloc directories (an alloc's
// directory, its namespaces' and the empty targets a plugin left in them,
// never reading a target's contents: removeAllocDirs) of every alloc with no
// publish in a record and no operation running or waiting: the way out
// leaves them, so that an unmount removes no directory on the manager's
// goroutine, and 100 allocs unmounting cost no more directory work than
// one. The reasoning
// is the staging directories': only a job of an operation of the alloc, or
// of a volume whose record holds the alloc's publish, creates or uses them.

// sweepDue is sent by the sweep's timer to the manager.
type sweepDue struct{}

// scheduleSweep arms the timer of the next sweep.
func (m *manager) scheduleSweep(ctx actor.Context) {
	if m.closing {
		return
	}
	root, self := ctx.ActorSystem().Root, ctx.Self()
	m.sweepTimer = m.cfg.Clock.AfterFunc(m.cfg.SweepInterval, func() { root.Send(self, &sweepDue{}) })
}

// stopSweep stops the timer.
func (m *manager) stopSweep() {
	if m.sweepTimer != nil {
		m.sweepTimer.Stop()
		m.sweepTimer = nil
	}
}

func (m *manager) onSweepDue(ctx actor.Context) {
	m.sweepTimer = nil
	if removed := m.sweepStaging(); removed > 0 {
		m.log.Debug("removed the staging directories of idle volumes", "count", removed)
	}
	m.sweepAllocs()
	m.scheduleSweep(ctx)
}

// sweepStaging removes the staging directories no volume uses (see above)
// and returns how many.
func (m *manager) sweepStaging() int {
	removed := 0
	for _, plugin := range subdirs(m.env.paths.root) {
		staging := filepath.Join(m.env.paths.root, plugin, StagingDirName)
		for _, ns := range subdirs(staging) {
			for _, id := range subdirs(filepath.Join(staging, ns)) {
				key, dir := volumeKey{ns, id}, filepath.Join(staging, ns, id)
				if _, busy := m.queues[key]; busy || m.records[key].GetStage().GetStagingPath() == dir {
					continue
				}
				if m.removeIdle(dir) {
					removed++
				}
			}
			if !m.namespaceBusy(ns) {
				m.removeIdle(filepath.Join(staging, ns))
			}
		}
	}
	return removed
}

// sweepAllocs removes the empty per-alloc directories of the allocs that
// no record publishes to and no operation is for (see above).
func (m *manager) sweepAllocs() {
	busy := map[string]bool{}
	for _, rec := range m.records {
		for alloc := range rec.GetPublishes() {
			busy[alloc] = true
		}
	}
	for _, q := range m.queues {
		if q.running != nil {
			busy[q.running.alloc] = true
		}
		for _, o := range q.pending {
			busy[o.alloc] = true
		}
	}
	for _, plugin := range subdirs(m.env.paths.root) {
		perAlloc := filepath.Join(m.env.paths.root, plugin, PerAllocDirName)
		for _, alloc := range subdirs(perAlloc) {
			if busy[alloc] {
				continue
			}
			if err := removeAllocDirs(filepath.Join(perAlloc, alloc)); err != nil {
				m.log.Warn("could not remove an alloc's empty directories", "alloc_id", alloc, "error", err)
			}
		}
	}
}

// namespaceBusy reports whether an operation of a volume of ns runs or waits.
func (m *manager) namespaceBusy(ns string) bool {
	for key := range m.queues {
		if key.namespace == ns {
			return true
		}
	}
	return false
}

// removeIdle removes the directory dir when it is empty and no mount
// point (removeEmpty), and reports whether it is gone; a failure is logged.
func (m *manager) removeIdle(dir string) bool {
	gone, err := removeEmpty(dir)
	if err != nil {
		m.log.Warn("could not remove an idle staging directory", "path", dir, "error", err)
	}
	return gone
}

// subdirs lists the names of dir's subdirectories; none when dir cannot
// be read.
func subdirs(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}
