package agent

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/plugvisor/plugvisor/messages"
)

// metrics holds the agent's Prometheus collectors.
type metrics struct {
	reg *prometheus.Registry

	registryWrites   *prometheus.CounterVec
	registryLatency  *prometheus.HistogramVec
	registryBatch    prometheus.Histogram
	eventsDelivered  prometheus.Counter
	subscribers      prometheus.Gauge
	instanceRestarts *prometheus.CounterVec
	instanceGiveUps  *prometheus.CounterVec
	pluginHealthy    *prometheus.GaugeVec
	fingerprints     *prometheus.HistogramVec
	mounts           *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		registryWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plugvisor_registry_operations_total",
			Help: "Registry writes answered, by operation (register, deregister) and result (ok or error).",
		}, []string{"op", "result"}),
		registryLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "plugvisor_registry_operation_seconds",
			Help:    "Time from a registry write arriving to its answer, durable write included.",
			Buckets: prometheus.ExponentialBuckets(10e-6, 4, 10),
		}, []string{"op"}),
		registryBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "plugvisor_registry_batch_writes",
			Help:    "Writes per durable transaction (group commit).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}),
		eventsDelivered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "plugvisor_registry_events_delivered_total",
			Help: "Registry events handed to subscribers.",
		}),
		subscribers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "plugvisor_registry_subscribers",
			Help: "Registry subscribers now.",
		}),
		instanceRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plugvisor_instance_restarts_total",
			Help: "Plugin instance actors restarted by their supervisor.",
		}, []string{"type", "name"}),
		instanceGiveUps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plugvisor_instance_give_ups_total",
			Help: "Plugin instances that gave up under their supervision limits.",
		}, []string{"type", "name"}),
		pluginHealthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "plugvisor_plugin_healthy",
			Help: "1 when the plugin instance's last fingerprint was healthy, else 0.",
		}, []string{"type", "name"}),
		fingerprints: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "plugvisor_fingerprint_seconds",
			Help:    "How long each plugin fingerprint took, by plugin type and name.",
			Buckets: prometheus.ExponentialBuckets(100e-6, 4, 10),
		}, []string{"type", "name"}),
		mounts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plugvisor_mount_operations_total",
			Help: "Volume mount and unmount operations, by operation and result.",
		}, []string{"op", "result"}),
	}
	m.reg.MustRegister(m.registryWrites, m.registryLatency, m.registryBatch, m.eventsDelivered, m.subscribers,
		m.instanceRestarts, m.instanceGiveUps, m.pluginHealthy, m.fingerprints, m.mounts,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

// registryMetrics is the registry.Metrics the agent gives its registry.
type registryMetrics struct {
	m     *metrics
	store *storeHealth
}

func (r registryMetrics) Write(op string, err error, took time.Duration) {
	r.store.observe(err)
	r.m.registryWrites.WithLabelValues(op, result(err)).Inc()
	r.m.registryLatency.WithLabelValues(op).Observe(took.Seconds())
}
func (r registryMetrics) Batch(writes int)  { r.m.registryBatch.Observe(float64(writes)) }
func (r registryMetrics) EventsSent(n int)  { r.m.eventsDelivered.Add(float64(n)) }
func (r registryMetrics) Subscribers(n int) { r.m.subscribers.Set(float64(n)) }

// csiMetrics is the csi.ManagerMetrics the agent gives its CSI manager.
type csiMetrics struct{ m *metrics }

func (c csiMetrics) InstanceRestarting(p *messages.PluginInfo) {
	c.m.instanceRestarts.WithLabelValues(p.GetType(), p.GetName()).Inc()
}

func (c csiMetrics) InstanceGaveUp(p *messages.PluginInfo) {
	c.m.instanceGiveUps.WithLabelValues(p.GetType(), p.GetName()).Inc()
}

// observeFingerprint records one fingerprint's latency and health.
func (m *metrics) observeFingerprint(fp *messages.CSIFingerprint, took time.Duration) {
	m.fingerprints.WithLabelValues(fp.GetType(), fp.GetName()).Observe(took.Seconds())
	healthy := 0.0
	if fp.GetHealthy() {
		healthy = 1
	}
	m.pluginHealthy.WithLabelValues(fp.GetType(), fp.GetName()).Set(healthy)
}

// observeMount counts one mount or unmount through the API.
func (m *metrics) observeMount(op string, err error) {
	m.mounts.WithLabelValues(op, result(err)).Inc()
}
