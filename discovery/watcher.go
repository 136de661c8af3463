package discovery

import (
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fsnotify/fsnotify"
	"github.com/hashicorp/go-hclog"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/messages"
)

// DefaultRescanInterval is Config.RescanInterval when none is given.
const DefaultRescanInterval = 5 * time.Second

// watcherConfig configures the watcher of one directory.
type watcherConfig struct {
	dir      string
	reportTo *actor.PID // the discovery actor
	rescan   time.Duration
	log      hclog.Logger
}

// watcher is the actor that watches one plugin directory. It owns an
// fsnotify watcher on the directory and on each of its subdirectories
// (Docker allows <dir>/<name>/<name>.sock), and tells the discovery actor
// of every change with a DiscoveryDirectoryChanged. fsnotify's events come
// back to it as messages from a goroutine of its own, which ends when the
// actor stops or restarts.
//
// fsnotify alone is not trusted: a directory that does not exist yet, or
// that is deleted and recreated, cannot be watched in between, and an
// overflowing event queue loses events. So every rescan interval the
// watcher puts its watches back in place (on the new directory, if it was
// recreated) and asks for a scan all the same.
type watcher struct {
	cfg      watcherConfig
	fs       *fsnotify.Watcher // nil when inotify could not be had; rescans still run
	pumpDone chan struct{}
	watched  map[string]uint64 // path → inode of each watched directory
	timer    *time.Timer
}

// The watcher's messages to itself.
type (
	// fsEvent is sent by the fsnotify goroutine for each event.
	fsEvent struct{ event fsnotify.Event }
	// fsError is sent by the fsnotify goroutine for each error (an overflow, say).
	fsError struct{ err error }
	// rescanDue is sent by the rescan timer.
	rescanDue struct{}
)

// WatcherProps returns the props of a directory watcher actor: it watches
// dir and its subdirectories, and sends reportTo a DiscoveryDirectoryChanged
// at each change and every rescan interval. Other sources of plugins found
// in directories (kubelet's registration sockets) build on it.
func WatcherProps(dir string, reportTo *actor.PID, rescan time.Duration, log hclog.Logger) *actor.Props {
	return newWatcherProps(watcherConfig{dir: dir, reportTo: reportTo, rescan: rescan, log: log})
}

func newWatcherProps(cfg watcherConfig) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return &watcher{cfg: cfg} },
		actor.WithReceiverMiddleware(actors.PanicStack(cfg.log)))
}

// Receive handles the watcher's lifecycle, fsnotify's events and its timer.
func (w *watcher) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		w.onStarted(ctx)
	case *fsEvent:
		w.onEvent(ctx, msg)
	case *fsError:
		w.onError(ctx, msg)
	case *rescanDue:
		w.onRescan(ctx)
	case *actor.Stopping, *actor.Restarting:
		w.release()
	}
}

func (w *watcher) onStarted(ctx actor.Context) {
	w.watched = map[string]uint64{}
	fs, err := fsnotify.NewWatcher()
	if err != nil {
		w.cfg.log.Error("cannot watch plugin directory for changes: relying on the periodic rescan",
			"dir", w.cfg.dir, "rescan_interval", w.cfg.rescan, "error", err)
	} else {
		w.fs, w.pumpDone = fs, make(chan struct{})
		go pump(fs, ctx.ActorSystem().Root, ctx.Self(), w.pumpDone)
	}
	w.syncWatches()
	w.changed(ctx, true)
	w.schedule(ctx)
}

// pump hands fsnotify's events and errors to the watcher actor self until
// fs is closed, then closes done.
func pump(fs *fsnotify.Watcher, root *actor.RootContext, self *actor.PID, done chan struct{}) {
	defer close(done)
	events, errs := fs.Events, fs.Errors
	for events != nil || errs != nil {
		select {
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			root.Send(self, &fsEvent{event: ev})
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			root.Send(self, &fsError{err: err})
		}
	}
}

func (w *watcher) onEvent(ctx actor.Context, msg *fsEvent) {
	ev := msg.event
	if ev.Op == fsnotify.Chmod {
		return // says nothing about plugins (a removal sends Remove too)
	}
	if ev.Op.Has(fsnotify.Create) || ev.Op.Has(fsnotify.Remove) || ev.Op.Has(fsnotify.Rename) {
		w.syncWatches() // a subdirectory, or the directory itself, may have come or gone
	}
	w.changed(ctx, false)
}

func (w *watcher) onError(ctx actor.Context, msg *fsError) {
	w.cfg.log.Warn("watching plugin directory: scanning it again", "dir", w.cfg.dir, "error", msg.err)
	w.changed(ctx, true)
}

func (w *watcher) onRescan(ctx actor.Context) {
	w.timer = nil
	w.syncWatches()
	w.changed(ctx, true)
	w.schedule(ctx)
}

func (w *watcher) changed(ctx actor.Context, rescan bool) {
	ctx.Send(w.cfg.reportTo, &messages.DiscoveryDirectoryChanged{Dir: w.cfg.dir, Rescan: rescan})
}

func (w *watcher) schedule(ctx actor.Context) {
	root, self := ctx.ActorSystem().Root, ctx.Self()
	w.timer = time.AfterFunc(w.cfg.rescan, func() { root.Send(self, &rescanDue{}) })
}

// syncWatches watches the directory and its subdirectories as they are
// now: it adds the missing watches, replaces those on a directory that was
// deleted and recreated (a new inode), and drops those on directories that
// are gone. A directory that does not exist is simply not watched.
func (w *watcher) syncWatches() {
	if w.fs == nil {
		return
	}
	want := map[string]uint64{}
	if ino, ok := dirInode(w.cfg.dir); ok {
		want[w.cfg.dir] = ino
		entries, _ := os.ReadDir(w.cfg.dir)
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			sub := filepath.Join(w.cfg.dir, e.Name())
			if ino, ok := dirInode(sub); ok {
				want[sub] = ino
			}
		}
	}
	for path, ino := range w.watched {
		if want[path] != ino {
			_ = w.fs.Remove(path) // the kernel may have dropped it already
			delete(w.watched, path)
		}
	}
	for path, ino := range want {
		if _, ok := w.watched[path]; ok {
			continue
		}
		if err := w.fs.Add(path); err != nil {
			w.cfg.log.Debug("cannot watch directory yet", "dir", path, "error", err)
			continue
		}
		w.watched[path] = ino
	}
}

// dirInode returns the inode of the directory at path.
func dirInode(path string) (uint64, bool) {
	fi, err := os.Stat(path)
	if err != nil || !fi.IsDir() {
		return 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, true
	}
	return st.Ino, true
}

// release stops the timer and the fsnotify watcher, and waits for the
// goroutine that read its events.
func (w *watcher) release() {
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	if w.fs != nil {
		_ = w.fs.Close()
		<-w.pumpDone
		w.fs = nil
	}
}
