package hostpath

import "sync"

// volumeLocks hands out one lock per volume ID, kept only while someone
// holds or waits for it. Node RPCs of different volumes run at once, as a
// real driver's do; those of one volume run one at a time.
type volumeLocks struct {
	mu    sync.Mutex
	locks map[string]*volumeLock
}

// volumeLock is one volume's lock and how many hold or wait for it.
type volumeLock struct {
	sync.Mutex
	users int
}

// lock takes id's lock and returns the function that releases it.
func (v *volumeLocks) lock(id string) (unlock func()) {
	v.mu.Lock()
	if v.locks == nil {
		v.locks = map[string]*volumeLock{}
	}
	l := v.locks[id]
	if l == nil {
		l = &volumeLock{}
		v.locks[id] = l
	}
	l.users++
	v.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		v.mu.Lock()
		if l.users--; l.users == 0 {
			delete(v.locks, id)
		}
		v.mu.Unlock()
	}
}
