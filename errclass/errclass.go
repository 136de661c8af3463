// Package errclass is plugvisor's one set of error classes, as containerd's
// errdefs is. Every sentinel of every package belongs to one class:
//
//	var ErrVolumeNotFound = errclass.New(errclass.NotFound, "volume not found")
//
// A caller asks errors.Is(err, errclass.NotFound) without knowing which
// package refused. The wire (messages.ErrorToProto) and the HTTP API each
// map the classes once.
//
// A sentinel's text has no package prefix. A caller adds context once,
// with %w: fmt.Errorf("%w: no volume %q", ErrVolumeNotFound, id). A layer
// that adds a sentinel of its own to an error that already says what
// happened uses Also, which keeps the text. See "Errors" in
// ARCHITECTURE.md.
package errclass

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
)

// Class is one class of failure. errors.Is matches it against every
// sentinel of the class and every error that wraps one.
type Class struct{ name string }

// Error returns the class's name, such as "not found".
func (c *Class) Error() string { return c.name }

// The classes. Each says what the caller can do about the failure.
var (
	// Invalid: the request is malformed; nothing changed. Fix it and retry.
	Invalid = &Class{"invalid argument"}
	// Denied: the request's credentials are refused (a plugin's
	// PermissionDenied or Unauthenticated); nothing changed.
	Denied = &Class{"permission denied"}
	// NotFound: what the request names does not exist; nothing changed.
	NotFound = &Class{"not found"}
	// Conflict: the request conflicts with the current state (a claim, a
	// mount, a name taken); nothing changed.
	Conflict = &Class{"conflict"}
	// Limit: a configured limit is reached; nothing changed.
	Limit = &Class{"limit reached"}
	// Exhausted: a plugin is out of space or another resource of its own.
	Exhausted = &Class{"resource exhausted"}
	// Unsupported: the plugin or the agent does not do this.
	Unsupported = &Class{"unsupported"}
	// Upstream: a plugin failed in itself or answered out of its protocol;
	// the agent worked, its upstream did not.
	Upstream = &Class{"plugin failed"}
	// Unavailable: a service the request needs (a plugin, the fleet's
	// etcd) did not answer; nothing changed, and the request may be sent
	// again.
	Unavailable = &Class{"unavailable"}
	// ShutDown: the receiver is shut down; nothing changed.
	ShutDown = &Class{"shut down"}
	// Deadline: the operation did not finish in time; it may go on, or
	// roll back, without the caller.
	Deadline = &Class{"deadline exceeded"}
	// Store: the durable store failed; the change was not made.
	Store = &Class{"store failed"}
	// Corrupt: a stored record does not decode or is invalid.
	Corrupt = &Class{"record corrupt"}
)

// Classes returns every class, in the order of the list above.
func Classes() []*Class {
	return []*Class{Invalid, Denied, NotFound, Conflict, Limit, Exhausted, Unsupported,
		Upstream, Unavailable, ShutDown, Deadline, Store, Corrupt}
}

// Of returns the class of err (of the first sentinel or class its chain
// holds), or nil when err has none.
func Of(err error) *Class {
	var c *Class
	if errors.As(err, &c) {
		return c
	}
	return nil
}

// sentinel is a package's sentinel error: its text and its class.
type sentinel struct {
	id    string
	text  string
	class *Class
}

func (s *sentinel) Error() string { return s.text }
func (s *sentinel) Unwrap() error { return s.class }

// known holds every sentinel by its ID, so that an error that crossed an
// actor boundary or the wire finds its sentinels again.
var known sync.Map

const module = "github.com/plugvisor/plugvisor/"

// New returns a sentinel error of the calling package: its text is text
// (no package prefix), and errors.Is matches it and its class. Its ID, which
// the wire carries, is the package's path in the module and the text; New
// panics if the package already has a sentinel of that text.
func New(class *Class, text string) error {
	s := &sentinel{id: callerPackage() + ": " + text, text: text, class: class}
	if _, dup := known.LoadOrStore(s.id, s); dup {
		panic(fmt.Sprintf("errclass: two sentinels %q", s.id))
	}
	return s
}

// callerPackage is the path of the package that called New, relative to
// the module.
func callerPackage() string {
	pc, _, _, _ := runtime.Caller(2)
	fn := runtime.FuncForPC(pc).Name() // "path/to/pkg.init" or "path/to/pkg.F.func1"
	slash := strings.LastIndex(fn, "/")
	pkg := fn[:slash+1] + strings.SplitN(fn[slash+1:], ".", 2)[0]
	return strings.TrimPrefix(pkg, module)
}

// IDs returns the ID of every sentinel err matches, once each, in the order
// of its chain.
func IDs(err error) []string {
	var ids []string
	walk(err, func(s *sentinel) {
		for _, id := range ids {
			if id == s.id {
				return
			}
		}
		ids = append(ids, s.id)
	})
	return ids
}

func walk(err error, visit func(*sentinel)) {
	switch e := err.(type) {
	case nil:
		return
	case *sentinel:
		visit(e)
		return
	case interface{ Unwrap() []error }:
		for _, inner := range e.Unwrap() {
			walk(inner, visit)
		}
	case interface{ Unwrap() error }:
		walk(e.Unwrap(), visit)
	}
}

// Sentinels returns every sentinel made with New in this program so far,
// sorted by ID: for tests that send each across the wire.
func Sentinels() []error {
	var all []*sentinel
	known.Range(func(_, v any) bool {
		all = append(all, v.(*sentinel))
		return true
	})
	slices.SortFunc(all, func(a, b *sentinel) int { return strings.Compare(a.id, b.id) })
	out := make([]error, len(all))
	for i, s := range all {
		out[i] = s
	}
	return out
}

// ID returns the ID of a sentinel made with New ("csi/catalog: volume not
// found"), or "" for any other error.
func ID(err error) string {
	if s, ok := err.(*sentinel); ok {
		return s.id
	}
	return ""
}

// Rebuild makes again an error that crossed the wire: its text is text,
// and errors.Is matches each sentinel of ids that this program knows, and
// class (which may be nil).
func Rebuild(text string, class *Class, ids []string) error {
	out := &rebuilt{text: text}
	for _, id := range ids {
		if s, ok := known.Load(id); ok {
			out.matches = append(out.matches, s.(*sentinel))
		}
	}
	if class != nil && (len(out.matches) == 0 || Of(out.matches[0]) != class) {
		out.matches = append([]error{class}, out.matches...)
	}
	return out
}

// rebuilt is an error that crossed the wire.
type rebuilt struct {
	text    string
	matches []error
}

func (e *rebuilt) Error() string   { return e.text }
func (e *rebuilt) Unwrap() []error { return e.matches }

// Also returns an error with err's text that matches sentinel as well as
// everything err matches, and has err's class: for a layer that adds its
// own sentinel to an error that already says what happened, without saying
// it again. nil stays nil.
func Also(err, sentinel error) error {
	if err == nil {
		return nil
	}
	return &rebuilt{text: err.Error(), matches: []error{err, sentinel}}
}
