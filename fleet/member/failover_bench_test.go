package member_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet/member"
)

// failoverFigures are the times of one failover, counted from the
// crash: until the asker saw the member leave (its lease expired: the
// rest is re-routing), until the first and the last of the member's
// volumes answered; and how many volumes the member hosted.
type failoverFigures struct {
	seen, first, last time.Duration
	volumes           int
	// median is when half of the volumes had answered.
	median time.Duration
	// bare is the baseline of the re-routing (last - seen): as many bare
	// claims as there were volumes, all at once, on the same etcd, right
	// after (bareAtOnce).
	bare time.Duration
}

// report reports the figures under names that start with prefix: prefix-s
// is the last answer, the failover time.
func (f failoverFigures) report(b *testing.B, prefix string) {
	b.ReportMetric(f.last.Seconds(), prefix+"-s")
	b.ReportMetric(f.first.Seconds(), prefix+"-first-s")
	b.ReportMetric(f.median.Seconds(), prefix+"-p50-s")
	b.ReportMetric(f.seen.Seconds(), prefix+"-seen-s")
	b.ReportMetric(float64(f.volumes), prefix+"-volumes")
	b.ReportMetric((f.last - f.seen).Seconds(), prefix+"-reroute-s")
	b.ReportMetric(f.bare.Seconds(), prefix+"-bare-s")
}

// bareAtOnce does n bare claims (bareClaim) of n keys, each from a
// goroutine of its own, through one client, as one member's Store does,
// and returns how long until the last one is done.
func bareAtOnce(b *testing.B, c *benchCluster, n int) time.Duration {
	b.Helper()
	cl, err := clientv3.New(clientv3.Config{Endpoints: c.etcd.Endpoints(), DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	require.NoError(b, err)
	defer cl.Close()
	errs := make(chan error, n)
	start := time.Now()
	for i := range n {
		go func() {
			_, err := bareClaim(context.Background(), cl, fmt.Sprintf("bare-failover/%d", i), "claimed")
			errs <- err
		}()
	}
	for range n {
		require.NoError(b, <-errs)
	}
	return time.Since(start)
}

// The two ways the asker asks for the crashed member's volumes (orphans):
//
//   - claimEach claims each orphan from a goroutine of its own, as the
//     allocations that use the volumes do: each retries on its own, so the
//     failover is the time until every orphan answers a claim
//     (failover-s). This is what TTL + 1 s is measured against.
//   - claimQueued claims and releases the orphans 32 at a time (the
//     measure until 2026-11-26, failover-queued-s): an orphan then also
//     waits for the askers, in the benchmark, behind the orphans before it.
func claimEach(asker *member.Member, orphans []string, answered func()) error {
	errs := make(chan error, len(orphans))
	for _, v := range orphans {
		go func() {
			_, err := asker.Router().Claim(context.Background(), "", v, &model.Claim{
				AllocID: "failover-" + v, NodeID: "node-0", Mode: model.ClaimModeWrite, State: model.ClaimStateTaken,
			})
			answered()
			errs <- err
		}()
	}
	var first error
	for range orphans {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func claimQueued(asker *member.Member, orphans []string, answered func()) error {
	var next atomic.Int64
	errs := make(chan error, 32)
	for range 32 {
		go func() {
			for i := int(next.Add(1)) - 1; i < len(orphans); i = int(next.Add(1)) - 1 {
				_, _, err := claimRelease(asker, orphans[i], "failover-queued-"+orphans[i], "node-0")
				answered()
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	var first error
	for range 32 {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// failover crashes the cluster's last member (its lease is not revoked),
// and has the first member claim every volume whose grain it hosted, as
// ask does, from the crash on.
func failover(b *testing.B, c *benchCluster, ask func(*member.Member, []string, func()) error) failoverFigures {
	b.Helper()
	victim, asker := c.members[len(c.members)-1], c.members[0]
	var orphans []string
	for _, v := range c.volumes {
		if asker.Router().Owner("", v) == victim.ID() {
			orphans = append(orphans, v)
		}
	}
	require.NotEmpty(b, orphans, "member %s sees %d members (%d blocked)", asker.ID(), len(asker.Members()), asker.Cluster().GetBlockedMembers().Size())
	c.members = c.members[:len(c.members)-1]
	start := time.Now()
	victim.Crash()
	seen := make(chan time.Duration, 1)
	go func() {
		for slices.Contains(asker.Members(), victim.ID()) {
			time.Sleep(5 * time.Millisecond)
		}
		seen <- time.Since(start)
	}()
	var mu sync.Mutex
	var answers []time.Duration
	require.NoError(b, ask(asker, orphans, func() {
		mu.Lock()
		defer mu.Unlock()
		answers = append(answers, time.Since(start))
	}))
	f := failoverFigures{last: time.Since(start), first: slices.Min(answers), median: percentile(answers, 0.5), seen: <-seen, volumes: len(orphans)}
	f.bare = bareAtOnce(b, c, len(orphans))
	return f
}
