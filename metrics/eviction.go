package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Eviction stages, the label values of nodeguard_eviction_latency_seconds:
// each is the time from the previous stage's end (detect: from the
// threshold crossing to the agent noticing it; decide: to a victim
// chosen; kill: to the kill sent; release: to the victim's memory given
// back), and total from crossing to release.
const (
	StageDetect  = "detect"
	StageDecide  = "decide"
	StageKill    = "kill"
	StageRelease = "release"
	StageTotal   = "total"
)

// Eviction holds the eviction manager's series. Its methods are safe for
// concurrent use.
type Eviction struct {
	evictions  *prometheus.CounterVec
	dryRun     *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	staleness  prometheus.Gauge
	conditions *prometheus.GaugeVec
	oomKills   *prometheus.CounterVec
}

// Eviction registers the eviction manager's series on the exporter.
func (e *Exporter) Eviction() *Eviction {
	v := &Eviction{
		// The kubelet's name and label (pkg/kubelet/metrics), so existing
		// dashboards count nodeguard's evictions.
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kubelet_evictions",
			Help: "Cumulative number of pod evictions by eviction signal.",
		}, []string{"eviction_signal"}),
		dryRun: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeguard_eviction_dry_run_total",
			Help: "Evictions decided but not carried out (dry run), by eviction signal.",
		}, []string{"eviction_signal"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "nodeguard_eviction_latency_seconds",
			Help: "Eviction latency by stage: detect (threshold crossed to noticed), decide, kill (kill sent), release (memory given back), total.",
			// 100 µs to ~30 s: detection is meant to take milliseconds,
			// a graceful release seconds.
			Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 15),
		}, []string{"stage"}),
		staleness: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeguard_decision_staleness_seconds",
			Help: "Age of the statistics the newest eviction evaluation used.",
		}),
		conditions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodeguard_node_condition",
			Help: "Node conditions (MemoryPressure, DiskPressure, PIDPressure): 1 when true.",
		}, []string{"condition"}),
		oomKills: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeguard_oom_kills_attributed_total",
			Help: "Kernel OOM kills seen through eBPF, attributed to a pod (empty labels: outside any pod).",
		}, []string{"namespace", "pod"}),
	}
	for _, c := range []string{"MemoryPressure", "DiskPressure", "PIDPressure"} {
		v.conditions.WithLabelValues(c).Set(0)
	}
	e.reg.MustRegister(v.evictions, v.dryRun, v.latency, v.staleness, v.conditions, v.oomKills)
	return v
}

// Evicted counts one eviction and observes its stage latencies (a stage
// missing from stages was not reached).
func (v *Eviction) Evicted(signal string, dryRun bool, stages map[string]time.Duration) {
	if dryRun {
		v.dryRun.WithLabelValues(signal).Inc()
	} else {
		v.evictions.WithLabelValues(signal).Inc()
	}
	for stage, d := range stages {
		v.latency.WithLabelValues(stage).Observe(d.Seconds())
	}
}

// Released observes the release stage (and total) of an eviction, which
// completes after the decision.
func (v *Eviction) Released(release, total time.Duration) {
	v.latency.WithLabelValues(StageRelease).Observe(release.Seconds())
	v.latency.WithLabelValues(StageTotal).Observe(total.Seconds())
}

// Staleness sets the age of the statistics of the newest evaluation.
func (v *Eviction) Staleness(d time.Duration) { v.staleness.Set(d.Seconds()) }

// Condition sets a node condition.
func (v *Eviction) Condition(name string, on bool) {
	x := 0.0
	if on {
		x = 1
	}
	v.conditions.WithLabelValues(name).Set(x)
}

// OOMKill counts a kernel OOM kill attributed to a pod ("" for none).
func (v *Eviction) OOMKill(namespace, pod string) {
	v.oomKills.WithLabelValues(namespace, pod).Inc()
}
