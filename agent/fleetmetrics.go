package agent

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
)

// fleetMetrics are the agent's fleet series, plugvisor_fleet_*: the
// fleet.Metrics the agent gives its fleet.Store, and the stranded
// detaches the agent counts itself. The lease and etcd's reachability are
// read from the Store at each scrape. (Fence events are the volume
// manager's: plugvisor_volume_fence_events_total.)
type fleetMetrics struct {
	etcdLatency *prometheus.HistogramVec
	etcdCalls   *prometheus.CounterVec
	claims      *prometheus.CounterVec
	grains      prometheus.Counter
	gcFreed     prometheus.Counter
	gcDetached  *prometheus.CounterVec
}

var _ fleet.Metrics = (*fleetMetrics)(nil)

// newFleetMetrics registers the fleet's series on reg; store is the
// fleet.Store to read the lease of (nil without cluster mode: no lease
// series).
func newFleetMetrics(reg *prometheus.Registry, store func() *fleet.Store) *fleetMetrics {
	m := &fleetMetrics{
		etcdLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "plugvisor_fleet_etcd_request_seconds",
			Help:    "Time of each call of this node to etcd, by operation (claim, list volumes, ...), retries of a lost race included.",
			Buckets: prometheus.ExponentialBuckets(250e-6, 4, 10),
		}, []string{"op"}),
		etcdCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plugvisor_fleet_etcd_requests_total",
			Help: "Calls of this node to etcd, by operation and result: ok, error (etcd answered with a refusal), unavailable (etcd did not answer).",
		}, []string{"op", "result"}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plugvisor_fleet_claims_total",
			Help: "Claims this node's volume grains applied in etcd, by outcome: ok, refused, unavailable, error.",
		}, []string{"outcome"}),
		grains: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "plugvisor_fleet_grain_activations_total",
			Help: "Volume grains started on this member.",
		}),
		gcFreed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "plugvisor_fleet_gc_freed_claims_total",
			Help: "Claims of down nodes that this node's GC freed.",
		}),
		gcDetached: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plugvisor_fleet_gc_detached_total",
			Help: "Attachments of down nodes this node detached through its controllers, by result (ok, error).",
		}, []string{"result"}),
	}
	reg.MustRegister(m.etcdLatency, m.etcdCalls, m.claims, m.grains, m.gcFreed, m.gcDetached, &leaseCollector{store: store})
	for _, outcome := range fleet.ClaimOutcomes {
		m.claims.WithLabelValues(outcome)
	}
	for _, r := range results {
		m.gcDetached.WithLabelValues(r)
	}
	return m
}

// EtcdRequest implements fleet.Metrics.
func (m *fleetMetrics) EtcdRequest(what string, took time.Duration, err error) {
	m.etcdLatency.WithLabelValues(what).Observe(took.Seconds())
	result := "ok"
	switch {
	case errors.Is(err, model.ErrFleetUnavailable):
		result = "unavailable"
	case err != nil:
		result = "error"
	}
	m.etcdCalls.WithLabelValues(what, result).Inc()
}

// Claimed implements fleet.Metrics.
func (m *fleetMetrics) Claimed(outcome string) { m.claims.WithLabelValues(outcome).Inc() }

// GCFreed implements fleet.Metrics.
func (m *fleetMetrics) GCFreed(n int) { m.gcFreed.Add(float64(n)) }

// GrainActivated implements fleet.Metrics.
func (m *fleetMetrics) GrainActivated() { m.grains.Inc() }

// detached counts one detach of a down node's attachment.
func (m *fleetMetrics) detached(err error) { m.gcDetached.WithLabelValues(result(err)).Inc() }

// leaseCollector reports this node's lease and etcd's reachability, read
// from the fleet.Store at each scrape; nothing without one.
type leaseCollector struct {
	store func() *fleet.Store
}

var (
	leaseStandingDesc = prometheus.NewDesc("plugvisor_fleet_lease_standing",
		"This node's standing in the fleet, from its lease's last renewal: 0 held, 1 at risk (no renewal for half the TTL and half a second), 2 lost (none for a whole TTL: the fleet may count the node down).", nil, nil)
	leaseRenewedDesc = prometheus.NewDesc("plugvisor_fleet_lease_renewed_timestamp_seconds",
		"When etcd last granted or renewed this node's lease, in Unix seconds.", nil, nil)
	etcdReachableDesc = prometheus.NewDesc("plugvisor_fleet_etcd_reachable",
		"1 while etcd answered this node's latest call, else 0.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *leaseCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- leaseStandingDesc
	ch <- leaseRenewedDesc
	ch <- etcdReachableDesc
}

// Collect implements prometheus.Collector.
func (c *leaseCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.store()
	if s == nil {
		return
	}
	reachable := 0.0
	if s.EtcdUnreachable() == nil {
		reachable = 1
	}
	ch <- prometheus.MustNewConstMetric(leaseStandingDesc, prometheus.GaugeValue, float64(s.Standing(time.Now())))
	ch <- prometheus.MustNewConstMetric(leaseRenewedDesc, prometheus.GaugeValue, float64(s.LeaseRenewed().UnixNano())/1e9)
	ch <- prometheus.MustNewConstMetric(etcdReachableDesc, prometheus.GaugeValue, reachable)
}
