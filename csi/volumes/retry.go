package volumes

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/plugvisor/plugvisor/csi"
)

// volumeRetry bounds the retries of a volume RPC.
type volumeRetry struct {
	attempts int
	backoff  time.Duration
	max      time.Duration
}

// delay is the wait before retry number n (1 for the first): backoff,
// doubled for each further retry, at most max.
func (p volumeRetry) delay(n int) time.Duration {
	d := p.backoff
	for i := 1; i < n && d < p.max; i++ {
		d *= 2
	}
	return min(d, p.max)
}

// retryableVolumeRPC reports whether an RPC error is worth another attempt: the
// plugin is unavailable, timed out, or has another operation on the volume
// in flight (Aborted).
func retryableVolumeRPC(err error) bool {
	return errors.Is(err, csi.ErrUnavailable) || errors.Is(err, csi.ErrDeadlineExceeded) || errors.Is(err, csi.ErrAborted)
}

// retryVolumeRPC calls rpc until it succeeds, fails with an error that is not
// retryable (retryableVolumeRPC), has been tried e.retry.attempts times, or
// ctx ends.
func retryVolumeRPC[T any](ctx context.Context, e *volumeJobEnv, rpc string, call func(context.Context) (T, error)) (T, error) {
	for attempt := 1; ; attempt++ {
		out, err := call(ctx)
		if err == nil || !retryableVolumeRPC(err) {
			return out, err
		}
		if attempt >= e.retry.attempts {
			return out, fmt.Errorf("csi: gave up after %d attempts: %w", attempt, err)
		}
		wait := e.retry.delay(attempt)
		e.log.Warn("retrying RPC", "rpc", rpc, "attempt", attempt, "wait", wait, "error", err)
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return out, fmt.Errorf("csi: stopped retrying after %d attempts: %w: %w", attempt, ctx.Err(), err)
		}
	}
}
