package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// isTerminal says whether w is a terminal. Progress is drawn only there;
// tests replace it.
var isTerminal = func(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// progressTick is how often a progress line is redrawn.
var progressTick = 200 * time.Millisecond

// progress draws one line on a terminal ("- creating volume default/db
// (3s)"), redrawn until end clears it. On anything but a terminal, or
// under -json, it draws nothing.
type progress struct {
	w     io.Writer
	start time.Time
	stop  chan struct{}
	done  chan struct{}

	mu   sync.Mutex
	what string
}

// startProgress starts drawing what on w, unless quiet or w is no terminal.
func startProgress(w io.Writer, quiet bool, what string) *progress {
	p := &progress{w: w, start: time.Now(), what: what, stop: make(chan struct{}), done: make(chan struct{})}
	if quiet || !isTerminal(w) {
		close(p.done)
		return p
	}
	go p.draw()
	return p
}

// set changes what the line says.
func (p *progress) set(what string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.what = what
}

func (p *progress) draw() {
	defer close(p.done)
	tick := time.NewTicker(progressTick)
	defer tick.Stop()
	for frame := 0; ; frame++ {
		p.mu.Lock()
		fmt.Fprintf(p.w, "\r\033[K%c %s (%s)", `-\|/`[frame%4], p.what, time.Since(p.start).Round(time.Second))
		p.mu.Unlock()
		select {
		case <-p.stop:
			fmt.Fprint(p.w, "\r\033[K")
			return
		case <-tick.C:
		}
	}
}

// end stops drawing and clears the line.
func (p *progress) end() {
	select {
	case <-p.done:
	default:
		close(p.stop)
		<-p.done
	}
}
