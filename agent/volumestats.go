package agent

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plugvisor/plugvisor/csi/volumes"
)

// nodeSupportsStats says whether the node plugin named plugin advertised
// GET_VOLUME_STATS in its latest fingerprint on this node: the volume
// manager's periodic stats ask only those (no RPC to learn it).
func (a *Agent) nodeSupportsStats(plugin string) bool {
	if a.csi == nil {
		return false
	}
	for _, fp := range a.csi.Plugins() {
		if fp.GetType() == volumes.NodePluginType && fp.GetName() == plugin {
			return fp.GetHealthy() && slices.Contains(fp.GetCapabilities().GetNode(), "GET_VOLUME_STATS")
		}
	}
	return false
}

// volumeStatsCollector exports the volume manager's periodic stats as
// gauges named like kubelet's kubelet_volume_stats_*, one series per
// published volume (labels namespace, volume, plugin), read at each
// scrape: a volume no longer published has no series.
type volumeStatsCollector struct {
	samples func() []volumes.StatsSample
	descs   map[string]*prometheus.Desc
}

// volumeStatsGauges names each gauge and says what it is.
var volumeStatsGauges = map[string]string{
	"capacity_bytes":         "Capacity of the volume in bytes, as its node plugin's NodeGetVolumeStats said (total).",
	"available_bytes":        "Bytes available on the volume, as its node plugin's NodeGetVolumeStats said.",
	"used_bytes":             "Bytes used on the volume, as its node plugin's NodeGetVolumeStats said.",
	"inodes":                 "Inodes of the volume, as its node plugin's NodeGetVolumeStats said (total).",
	"inodes_free":            "Free inodes of the volume, as its node plugin's NodeGetVolumeStats said.",
	"inodes_used":            "Used inodes of the volume, as its node plugin's NodeGetVolumeStats said.",
	"health_status_abnormal": "1 when the node plugin reports the volume abnormal (its volume condition, or NotFound), else 0; absent when it says nothing of the condition.",
}

func newVolumeStatsCollector(samples func() []volumes.StatsSample) *volumeStatsCollector {
	c := &volumeStatsCollector{samples: samples, descs: map[string]*prometheus.Desc{}}
	for name, help := range volumeStatsGauges {
		c.descs[name] = prometheus.NewDesc("plugvisor_volume_stats_"+name, help, []string{"namespace", "volume", "plugin"}, nil)
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *volumeStatsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *volumeStatsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.samples() {
		emit := func(name string, v int64) {
			ch <- prometheus.MustNewConstMetric(c.descs[name], prometheus.GaugeValue, float64(v), s.Namespace, s.VolumeID, s.PluginID)
		}
		for _, u := range s.Usage {
			switch u.GetUnit() {
			case "bytes":
				emit("capacity_bytes", u.GetTotal())
				emit("available_bytes", u.GetAvailable())
				emit("used_bytes", u.GetUsed())
			case "inodes":
				emit("inodes", u.GetTotal())
				emit("inodes_free", u.GetAvailable())
				emit("inodes_used", u.GetUsed())
			}
		}
		if s.ConditionKnown {
			abnormal := int64(0)
			if s.Abnormal {
				abnormal = 1
			}
			emit("health_status_abnormal", abnormal)
		}
	}
}
