package agent

import (
	"cmp"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/dockervolume"
	"github.com/plugvisor/plugvisor/kubeletreg"
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
	kubeletRefusals  *prometheus.CounterVec
	fences           *prometheus.CounterVec
	// fleet are the fleet's series, in cluster mode only (startCluster).
	fleet *fleetMetrics
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
		kubeletRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plugvisor_kubelet_registrations_refused_total",
			Help: "Registrations through kubelet's registration sockets that were refused, by reason (kubeletreg.Reasons).",
		}, []string{"reason"}),
		fences: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plugvisor_volume_events_total",
			Help: "What became of mounts when this node's lease in the fleet was at risk, lost or renewed, by kind (claim-at-risk, claim-lost, fence-failed, claim-restored, claim-gone).",
		}, []string{"kind"}),
	}
	m.reg.MustRegister(m.registryWrites, m.registryLatency, m.registryBatch, m.eventsDelivered, m.subscribers,
		m.instanceRestarts, m.instanceGiveUps, m.pluginHealthy, m.fingerprints, m.mounts, m.activations, m.kubeletRefusals, m.fences,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, op := range []string{"register", "deregister"} {
		m.registryLatency.WithLabelValues(op)
		for _, r := range results {
			m.registryWrites.WithLabelValues(op, r)
		}
	}
	for _, reason := range kubeletreg.Reasons {
		m.kubeletRefusals.WithLabelValues(reason)
	}
	for _, kind := range eventKinds {
		m.fences.WithLabelValues(string(kind))
	}
	for _, op := range mountOps {
		for _, r := range results {
			m.mounts.WithLabelValues(op, r)
		}
	}
	return m
}

// results are the values of the "result" label.
var results = []string{"ok", "error"}

// mountOps are the operations the API counts in plugvisor_mount_operations_total.
var mountOps = []string{"mount", "unmount", "docker-mount", "docker-unmount"}

// eventKinds are the values of plugvisor_volume_events_total's "kind".
var eventKinds = []volumes.EventKind{volumes.EventClaimAtRisk, volumes.EventClaimLost, volumes.EventFenceFailed, volumes.EventClaimRestored, volumes.EventClaimGone,
	volumes.EventConditionAbnormal, volumes.EventConditionNormal}

// activationThens are what may follow a failed activation (discovery.Metrics).
var activationThens = []string{"retry", "slow", "wait"}

// instanceTypes are the plugin types whose plugins get a supervised
// instance, counted in the restart and give-up metrics.
var instanceTypes = []string{csi.TypeController, csi.TypeNode, dockervolume.PluginType}

// instanceTypes are instanceTypes and the embedder's plugin types.
func (a *Agent) instanceTypes() []string {
	types := slices.Clone(instanceTypes)
	for _, t := range a.cfg.PluginTypes {
		types = append(types, t.Name)
	}
	return types
}

// handler serves the metrics. Before each scrape it gives every plugin
// the agent knows (the embedder's types' too) its label sets, at zero until something is counted:
// restarts and give-ups for each plugin with an instance, fingerprint
// latency for each CSI plugin, failed activations for each plugin found on
// disk. (Health is left to the first check: a 0 there would mean
// unhealthy.)
func (m *metrics) handler(a *Agent) http.Handler {
	serve := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, ptype := range a.instanceTypes() {
			for _, p := range a.registry.ListPlugins(ptype) {
				m.instanceRestarts.WithLabelValues(ptype, p.GetName())
				m.instanceGiveUps.WithLabelValues(ptype, p.GetName())
				if ptype == csi.TypeController || ptype == csi.TypeNode {
					m.fingerprints.WithLabelValues(ptype, p.GetName())
				}
			}
		}
		for _, p := range a.disc.Plugins() {
			for _, then := range activationThens {
				m.activations.WithLabelValues(p.GetName(), then)
			}
		}
		serve.ServeHTTP(w, r)
	})
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

// csiMetrics is the csi.ManagerMetrics, dockervolume.Metrics and
// TypeMetrics the agent gives its plugin managers: restarts and give-ups of
// every plugin type.
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

// Refused implements kubeletreg.Metrics.
func (m *metrics) Refused(reason string) { m.kubeletRefusals.WithLabelValues(reason).Inc() }

// discoveredStates counts discovered plugins for /v1/health by state
// ("registered": 3) and, of those checked, by health ("healthy": 2); every
// key is present, at zero when nothing is in it.
func discoveredStates(found []*messages.DiscoveredPlugin) map[string]int {
	counts := map[string]int{"healthy": 0, "unhealthy": 0}
	for _, state := range discoveredStateNames {
		counts[state] = 0
	}
	for _, p := range found {
		counts[stateName(p.GetState())]++
		if p.GetHealth() != "" {
			counts[p.GetHealth()]++
		}
	}
	return counts
}

// discoveredStateNames are the states of discovered plugins that the
// health endpoint and the metrics always report, at zero when empty.
var discoveredStateNames = []string{
	stateName(messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_ACTIVATING),
	stateName(messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_REGISTERED),
	stateName(messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_FAILED),
	stateName(messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_INVALID),
}

// discoveredHealths are the values of plugvisor_discovered_plugins' health label.
var discoveredHealths = []string{"healthy", "unhealthy", "unknown"}

// discoveredCollector reports how many discovered plugins are in each state
// and health, read from discovery at each scrape; every pair of a listed
// state and a health is reported, at zero when empty.
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
	for _, state := range discoveredStateNames {
		for _, health := range discoveredHealths {
			counts[[2]string{state, health}] = 0
		}
	}
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
