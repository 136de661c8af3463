package api

import (
	"sync"
	"time"
)

// warnEvery is how often one request path's 503s are logged at WARN: a
// client that retries a mount through a fenced node would otherwise log
// a warning per try. The others go to DEBUG, and the next warning counts
// them.
const warnEvery = 10 * time.Second

// warnKeys is how many paths warnLimiter remembers before it forgets
// those quiet for warnEvery.
const warnKeys = 1024

// warnLimiter lets one warning of a key through per warnEvery and counts
// the others. Its zero value is ready; it is safe for concurrent use.
type warnLimiter struct {
	mu   sync.Mutex
	last map[string]*warned
}

// warned is when a key's last warning was let through, and how many
// were held back since.
type warned struct {
	at   time.Time
	held int
}

// allow reports whether a warning of key may be logged at now and, if
// so, how many of key's were held back since the last one.
func (l *warnLimiter) allow(key string, now time.Time) (ok bool, held int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.last[key]
	if w != nil && now.Sub(w.at) < warnEvery {
		w.held++
		return false, 0
	}
	if w == nil {
		if l.last == nil {
			l.last = map[string]*warned{}
		}
		if len(l.last) >= warnKeys {
			l.forget(now)
		}
		w = &warned{}
		l.last[key] = w
	}
	held = w.held
	w.at, w.held = now, 0
	return true, held
}

// forget drops the keys quiet for warnEvery. l.mu is held.
func (l *warnLimiter) forget(now time.Time) {
	for k, w := range l.last {
		if now.Sub(w.at) >= warnEvery {
			delete(l.last, k)
		}
	}
}
