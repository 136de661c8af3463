// Package cputime is the CPU time this process has used, for the
// benchmarks and tests that report CPU per operation: every thread's user
// and system time, the garbage collector's included.
package cputime

import (
	"syscall"
	"time"
)

// Used is the CPU time the process has used so far, or 0 if the kernel
// does not say.
func Used() time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
