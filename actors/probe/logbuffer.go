package probe

import (
	"strings"
	"sync"
)

// LogBuffer is an io.Writer that many goroutines may write to while a test
// reads what they wrote: the log sink of a test that asserts on log lines
// (hclog.LoggerOptions.Output, a subprocess's stderr). The zero value is
// ready to use.
type LogBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

// Write appends p.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
