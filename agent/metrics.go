package agent

import (
	"cmp"
	"strings"
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
	activations      *prometheus.CounterVec
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
		activations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plugvisor_discovery_activation_failures_total",
			Help: "Failed activations of discovered plugins, by plugin name and what follows: retry (fast backoff), slow (slow retry), wait (wait for the file to change).",
		}, []string{"name", "then"}),
	}
	m.reg.MustRegister(m.registryWrites, m.registryLatency, m.registryBatch, m.eventsDelivered, m.subscribers,
		m.instanceRestarts, m.instanceGiveUps, m.pluginHealthy, m.fingerprints, m.mounts, m.activations,
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

// csiMetrics is the csi.ManagerMetrics and dockervolume.ManagerMetrics the
// agent gives its plugin managers: restarts and give-ups of every plugin type.
type csiMetrics struct{ m *metrics }

// PluginHealth sets the health gauge of a plugin whose manager does not
// fingerprint (Docker volume plugins).
func (c csiMetrics) PluginHealth(ptype, name string, healthy bool) {
	c.m.pluginHealthy.WithLabelValues(ptype, name).Set(map[bool]float64{true: 1}[healthy])
}

// ActivationFailed implements discovery.Metrics.
func (m *metrics) ActivationFailed(name, then string) {
	m.activations.WithLabelValues(name, then).Inc()
}

// discoveredStates counts discovered plugins for /v1/health by state
// ("registered": 3) and, of those checked, by health ("healthy": 2); every
// key is present, at zero when nothing is in it.
func discoveredStates(found []*messages.DiscoveredPlugin) map[string]int {
	counts := map[string]int{"healthy": 0, "unhealthy": 0}
	for _, state := range []messages.DiscoveredPluginState{messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_ACTIVATING,
		messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_REGISTERED, messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_FAILED,
		messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_INVALID} {
		counts[stateName(state)] = 0
	}
	for _, p := range found {
		counts[stateName(p.GetState())]++
		if p.GetHealth() != "" {
			counts[p.GetHealth()]++
		}
	}
	return counts
}

// discoveredCollector reports how many discovered plugins are in each state,
// read from discovery at each scrape.
type discoveredCollector struct {
	plugins func() []*messages.DiscoveredPlugin
	desc    *prometheus.Desc
}

func newDiscoveredCollector(plugins func() []*messages.DiscoveredPlugin) *discoveredCollector {
	return &discoveredCollector{plugins: plugins, desc: prometheus.NewDesc("plugvisor_discovered_plugins",
		"Plugins found on disk, by state (activating, registered, failed, invalid) and health (healthy, unhealthy, unknown).",
		[]string{"state", "health"}, nil)}
}

// Describe implements prometheus.Collector.
func (c *discoveredCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *discoveredCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[[2]string]int{}
	for _, p := range c.plugins() {
		counts[[2]string{stateName(p.GetState()), cmp.Or(p.GetHealth(), "unknown")}]++
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
}

// stateName is the short name of a discovered plugin's state: "registered".
func stateName(s messages.DiscoveredPluginState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "DISCOVERED_PLUGIN_STATE_"))
}

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
