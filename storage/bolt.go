package storage

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/plugvisor/plugvisor/errclass"
)

// DefaultLockTimeout is how long OpenBolt waits for another holder of the
// file's lock when BoltOptions.LockTimeout is zero.
const DefaultLockTimeout = time.Second

// BoltOptions tunes OpenBolt. The zero value is the production setting.
type BoltOptions struct {
	// LockTimeout is how long to wait for another process (or another open
	// store in this process) to release the file before failing with
	// ErrLocked; zero means DefaultLockTimeout. OpenBolt never waits forever.
	LockTimeout time.Duration
	// MoveAsideCorrupt, when the file is corrupt, renames it to
	// <path>.corrupt-<UTC timestamp>, logs what was done, and starts an empty
	// store; otherwise OpenBolt fails with ErrCorrupt. The agent sets it from
	// its -reset-corrupt-state flag. Files that cannot be read for other
	// reasons (permissions, a directory, I/O errors) are never moved.
	MoveAsideCorrupt bool
	// NoSync skips fsync, so Apply returns before its batch is on disk. For
	// benchmarks only: an operating system crash or power loss then loses
	// acknowledged writes and can leave a file that no longer opens.
	NoSync bool
	// Logger receives the notice of a file moved aside; nil means
	// hclog.Default().
	Logger hclog.Logger
}

// Bolt is a Store in one bbolt file, locked against other processes while
// open. Concurrent Apply calls, on one bucket or several, share one
// transaction and its fsyncs (a group commit); a lone Apply commits at once,
// without waiting for company.
type Bolt struct {
	path   string
	db     *bolt.DB
	writes groupCommit

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// Commits returns how many transactions the store has committed since it
// opened: each is one group commit, made durable by bbolt's two fdatasyncs
// (the pages, then the meta page). Benchmarks divide it by their work.
func (b *Bolt) Commits() int64 {
	return b.writes.commits.Load()
}

// CommitTime returns the time the store has spent in its commits since it
// opened (writing pages and syncing them): over a run's wall time, the
// share of it the store was busy. Benchmarks report it.
func (b *Bolt) CommitTime() time.Duration {
	return time.Duration(b.writes.busy.Load())
}

// OpenBolt opens the store at path, creating the file if it does not exist
// (its directory must). It fails with ErrLocked when another holder keeps the
// file locked past opts.LockTimeout, and with ErrCorrupt when the file does
// not pass bbolt's open checks, is shorter than its own pages say, holds
// pages bbolt cannot read, fails tx.Check, or is empty (OpenBolt never leaves
// an empty file behind: a new file is initialised under a temporary name and
// linked into place, so an empty file at path was cut short by something
// else; creating needs hard links in the file's directory). With
// opts.MoveAsideCorrupt a corrupt file is moved aside instead. A meta page
// whose header alone is damaged is rewritten, with a warning: the header
// has one right value (metaheader.go).
func OpenBolt(path string, opts BoltOptions) (*Bolt, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	if opts.Logger == nil {
		opts.Logger = hclog.Default()
	}
	db, err := openVerified(path, opts)
	if err != nil && errors.Is(err, ErrCorrupt) && opts.MoveAsideCorrupt {
		movedTo, moveErr := moveAside(path, time.Now())
		if moveErr != nil {
			return nil, fmt.Errorf("%w; moving it aside failed: %w", err, moveErr)
		}
		opts.Logger.Warn("storage: state file was corrupt; moved it aside and started with an empty store",
			"path", path, "moved_to", movedTo, "error", err)
		db, err = openVerified(path, opts)
	}
	if err != nil {
		return nil, err
	}
	return &Bolt{path: path, db: db, writes: groupCommit{db: db, path: path}}, nil
}

// Path returns the file the store was opened from.
func (s *Bolt) Path() string {
	return s.path
}

// Bucket returns the bucket called name. See Store.
func (s *Bolt) Bucket(name string) (Bucket, error) {
	if err := validateBucketName(name); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, ErrClosed
	}
	return &boltBucket{store: s, name: name, key: []byte(name)}, nil
}

// Close waits for the commit and the Load calls in progress, then closes the
// file and releases its lock; Apply calls still waiting for a commit fail
// with ErrClosed. Later calls to Close return nil.
func (s *Bolt) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		if err := s.db.Close(); err != nil {
			s.closeErr = fmt.Errorf("close %s: %w", s.path, err)
		}
	})
	return s.closeErr
}

// boltBucket is one bucket of a Bolt store.
type boltBucket struct {
	store *Bolt
	name  string
	key   []byte
}

// Load walks the bucket in a read transaction, checking each record's
// checksum before fn sees it: a record that fails its checksum stops the walk
// with an error matching ErrCorrupt. The slices passed to fn point into the
// memory-mapped file: they are valid only during the call and must not be
// changed. A long fn delays writers that need to grow the file.
func (b *boltBucket) Load(fn func(key, value []byte) error) error {
	if b.store.closed.Load() {
		return ErrClosed
	}
	var damaged error
	err := b.store.db.View(func(tx *bolt.Tx) error {
		bucket := tx.Bucket(b.key)
		if bucket == nil {
			return nil
		}
		return bucket.ForEach(func(k, v []byte) error {
			if v == nil {
				return nil // a nested bucket: this package never makes one
			}
			value, err := unseal(b.key, k, v)
			if err != nil {
				damaged = corrupt(b.store.path, err)
				return damaged
			}
			return fn(k, value)
		})
	})
	if damaged != nil {
		return damaged
	}
	return closedOr(err)
}

// Apply validates ops, then writes them in a group commit. See Bucket.
func (b *boltBucket) Apply(ops []Op) error {
	if err := validateOps(b.name, ops); err != nil {
		return err
	}
	if b.store.closed.Load() {
		return ErrClosed
	}
	if len(ops) == 0 {
		return nil
	}
	return b.store.writes.apply(b.key, ops)
}

// openVerified opens path for writing after checking that its contents can
// be trusted, creating it first when it does not exist.
func openVerified(path string, opts BoltOptions) (*bolt.DB, error) {
	deadline := time.Now().Add(opts.LockTimeout)
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := create(path); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, ioError(path, err)
	case !info.Mode().IsRegular():
		return nil, fmt.Errorf("%w: %s is not a regular file (mode %s): give the agent the path of a state file", ErrInvalid, path, info.Mode())
	case info.Size() == 0:
		return nil, corrupt(path, errors.New("the file is empty"))
	}

	// A read-only open loads nothing but the meta pages, so the file's length
	// and its pages can be checked against them before the writable open
	// reads further: a panic inside bolt.Open leaves its memory map, and with
	// it the file's lock, behind.
	ro, err := openBolt(path, &bolt.Options{ReadOnly: true, Timeout: remaining(deadline)}, opts.LockTimeout)
	if err != nil {
		return nil, err
	}
	err = recoverPanic(func() error {
		if err := checkLength(ro); err != nil {
			return err
		}
		return checkPages(ro)
	})
	_ = ro.Close() // read-only: nothing to flush
	var headers *damagedMetaHeaders
	if err != nil && !errors.As(err, &headers) {
		return nil, asCorrupt(path, err)
	}

	db, err := openBolt(path, &bolt.Options{Timeout: remaining(deadline), NoSync: opts.NoSync}, opts.LockTimeout)
	if err != nil {
		return nil, err
	}
	if headers != nil {
		if err := headers.repair(path); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("%s: %v; rewriting them failed: %w", path, headers, err)
		}
		opts.Logger.Warn("storage: rewrote the damaged header of a meta page, which has one right value; both commits are kept",
			"path", path, "found", headers.Error())
	}
	if err := recoverPanic(func() error { return check(db) }); err != nil {
		_ = db.Close()
		if errors.Is(err, errNewerFormat) {
			return nil, err
		}
		return nil, asCorrupt(path, err)
	}
	if err := recoverPanic(func() error { return upgrade(db) }); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("%s: add checksums to the records of an older file: %w", path, err)
	}
	return db, nil
}

// openBolt calls bolt.Open and sorts its failures into ErrLocked, ErrCorrupt
// and I/O errors. bbolt can panic on a damaged file (and fault on one shorter
// than its pages): that is recovered and reported as corrupt, after closing
// the file bbolt had opened so that its lock is released. (The half-made
// memory map of that file cannot be reached to unmap; it is small and happens
// once per damaged file.)
func openBolt(path string, options *bolt.Options, lockTimeout time.Duration) (*bolt.DB, error) {
	var file *os.File
	options.OpenFile = func(name string, flag int, perm os.FileMode) (*os.File, error) {
		f, err := os.OpenFile(name, flag, perm)
		file = f
		return f, err
	}
	var db *bolt.DB
	err := recoverPanic(func() error {
		var err error
		db, err = bolt.Open(path, 0o600, options)
		return err
	})
	switch {
	case err == nil:
		return db, nil
	case errors.Is(err, errPanicked):
		if file != nil {
			_ = file.Close()
		}
		return nil, corrupt(path, err)
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("%w: %s is held by another process or another open store (waited %s): stop the other plugvisor agent, or give this one its own state file",
			ErrLocked, path, lockTimeout)
	case file == nil, isSystemError(err):
		return nil, ioError(path, err)
	default:
		// The file opened and locked: what failed is its contents.
		return nil, corrupt(path, err)
	}
}

// checkLength fails when the file is shorter than the pages its meta page
// claims, which bbolt itself does not check and which would otherwise fault
// when those pages are read.
func checkLength(db *bolt.DB) error {
	info, err := os.Stat(db.Path())
	if err != nil {
		return err
	}
	return db.View(func(tx *bolt.Tx) error {
		if info.Size() < tx.Size() {
			return fmt.Errorf("the file is %d bytes but its pages need %d: it was cut short", info.Size(), tx.Size())
		}
		return nil
	})
}

// check reads every record of every bucket on this goroutine, where
// recoverPanic turns faults into errors, verifies every record's checksum,
// and then runs bbolt's consistency check (which reads the same pages on a
// goroutine of its own, where a fault would kill the process: checkPages,
// run before, leaves it no page to fault on).
func check(db *bolt.DB) error {
	return db.View(func(tx *bolt.Tx) error {
		err := tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			return walk(b)
		})
		if err != nil {
			return err
		}
		if err := verify(tx); err != nil {
			return err
		}
		var errs []error
		for err := range tx.Check() {
			errs = append(errs, err)
		}
		if len(errs) > 0 {
			return fmt.Errorf("consistency check found %d problem(s), the first: %w", len(errs), errs[0])
		}
		return nil
	})
}

// walk reads every key and value of b and of the buckets nested in it.
func walk(b *bolt.Bucket) error {
	var sum uint32
	return b.ForEach(func(k, v []byte) error {
		sum = crc32.Update(sum, crc32.IEEETable, k)
		if v != nil {
			sum = crc32.Update(sum, crc32.IEEETable, v)
			return nil
		}
		nested := b.Bucket(k)
		if nested == nil {
			return fmt.Errorf("key %q has no value and is not a bucket", k)
		}
		return walk(nested)
	})
}

// create makes a new, empty bbolt file at path. It initialises the file under
// a temporary name and links it into place, so that a crash never leaves an
// empty or half-written file at path; when another process linked its own
// file first, that one is kept.
func create(path string) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".new-*")
	if err != nil {
		return ioError(path, err)
	}
	tmpPath := tmp.Name()
	defer func() { _ = os.Remove(tmpPath) }()
	if err := tmp.Close(); err != nil {
		return ioError(path, err)
	}
	db, err := bolt.Open(tmpPath, 0o600, &bolt.Options{Timeout: time.Millisecond})
	if err != nil {
		return ioError(path, err)
	}
	if err := db.Close(); err != nil {
		return ioError(path, err)
	}
	if err := os.Link(tmpPath, path); err != nil && !errors.Is(err, fs.ErrExist) {
		return ioError(path, err)
	}
	return syncDir(dir, path)
}

// MoveAside renames the state file at path to <path>.corrupt-<UTC
// timestamp>, as OpenBolt does with MoveAsideCorrupt, and returns the new
// name. The agent calls it, with the store closed, when an owner finds a
// record it cannot use (an error matching ErrCorrupt from its load) and
// -reset-corrupt-state is given.
func MoveAside(path string) (string, error) {
	return moveAside(path, time.Now())
}

// moveAside renames the file at path to <path>.corrupt-<UTC timestamp> and
// returns the new name.
func moveAside(path string, now time.Time) (string, error) {
	movedTo := path + ".corrupt-" + now.UTC().Format("20060102T150405.000000000Z")
	if err := os.Rename(path, movedTo); err != nil {
		return "", ioError(path, err)
	}
	return movedTo, syncDir(filepath.Dir(path), path)
}

// syncDir makes a rename or link in dir durable.
func syncDir(dir, path string) error {
	d, err := os.Open(dir)
	if err != nil {
		return ioError(path, err)
	}
	err = d.Sync()
	if closeErr := d.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return ioError(path, err)
	}
	return nil
}

// remaining is the time left until deadline, at least a nanosecond (bbolt
// waits forever for a zero timeout).
func remaining(deadline time.Time) time.Duration {
	return max(time.Until(deadline), time.Nanosecond)
}

// errPanicked marks an error recovered from a panic or a memory fault.
// It is reported as corruption (corrupt).
var errPanicked = errclass.New(errclass.Corrupt, "bbolt panicked")

// recoverPanic calls fn, turning a panic, or a memory fault while reading the
// mapped file, into an error that wraps errPanicked.
func recoverPanic(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", errPanicked, p)
		}
	}()
	return fn()
}

// isSystemError reports whether err came from the operating system rather
// than from bbolt's reading of the file's contents.
func isSystemError(err error) bool {
	var errno syscall.Errno
	return errors.As(err, &errno)
}

// ioError reports a failure to reach the file, which is never taken for
// corruption.
func ioError(path string, err error) error {
	var pathErr *fs.PathError
	if errors.As(err, &pathErr) {
		return err // it names the path
	}
	return fmt.Errorf("%s: %w", path, err)
}

// asCorrupt reports err, met while checking the file's contents, as
// corruption of path, unless the operating system failed us.
func asCorrupt(path string, err error) error {
	if isSystemError(err) {
		return ioError(path, err)
	}
	return corrupt(path, err)
}

// corrupt wraps cause as ErrCorrupt with the file's name and what the
// operator can do about it.
func corrupt(path string, cause error) error {
	return fmt.Errorf("%w: %s: %w; the agent's -reset-corrupt-state flag (BoltOptions.MoveAsideCorrupt) moves it aside to %s.corrupt-<time> and starts with an empty store",
		ErrCorrupt, path, cause, path)
}
