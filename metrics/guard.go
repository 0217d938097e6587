package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Guard mode's series (nodeguard guard): what it did to the kubelet's
// pods and how its API calls fared.
var (
	guardPods = prometheus.NewDesc("nodeguard_guard_pods",
		"The kubelet's running pods guard mode found on the node (ready sandboxes with a pod cgroup).", nil, nil)
	guardKills = prometheus.NewDesc("nodeguard_guard_kills_total",
		"Pod cgroups guard mode killed for hard evictions.", nil, nil)
	guardRemovals = prometheus.NewDesc("nodeguard_guard_api_removals_total",
		"Evicted pods removed through the API server, by how: the Eviction API (eviction) or the Evicted status and a delete (delete).",
		[]string{"action"}, nil)
	guardRefusals = prometheus.NewDesc("nodeguard_guard_eviction_refusals_total",
		"Eviction API calls a PodDisruptionBudget refused (asked again after a back-off, never bypassed).", nil, nil)
	guardAPIErrors = prometheus.NewDesc("nodeguard_guard_api_errors_total",
		"API calls of evictions that failed otherwise (API server unreachable, ...); retried.", nil, nil)
	guardKubelet = prometheus.NewDesc("nodeguard_guard_kubelet_evicting_total",
		"Decisions on pods the kubelet was already evicting: left to it (soft), or only killed (hard).", nil, nil)
	guardPending = prometheus.NewDesc("nodeguard_guard_api_pending",
		"Killed pods whose removal through the API server is still to succeed.", nil, nil)
)

// GuardCounts are guard mode's figures at a scrape.
type GuardCounts struct {
	Pods                                                     int
	Kills, Evictions, Deletes, Refused, APIErrors, KubeletEv uint64
	Pending                                                  int
}

// Guard registers guard mode's series, read from read at every scrape.
func (e *Exporter) Guard(read func() GuardCounts) {
	e.reg.MustRegister(guardCollector(read))
}

type guardCollector func() GuardCounts

func (c guardCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{guardPods, guardKills, guardRemovals, guardRefusals, guardAPIErrors, guardKubelet, guardPending} {
		ch <- d
	}
}

func (c guardCollector) Collect(ch chan<- prometheus.Metric) {
	g := c()
	ch <- prometheus.MustNewConstMetric(guardPods, prometheus.GaugeValue, float64(g.Pods))
	ch <- prometheus.MustNewConstMetric(guardKills, prometheus.CounterValue, float64(g.Kills))
	ch <- prometheus.MustNewConstMetric(guardRemovals, prometheus.CounterValue, float64(g.Evictions), "eviction")
	ch <- prometheus.MustNewConstMetric(guardRemovals, prometheus.CounterValue, float64(g.Deletes), "delete")
	ch <- prometheus.MustNewConstMetric(guardRefusals, prometheus.CounterValue, float64(g.Refused))
	ch <- prometheus.MustNewConstMetric(guardAPIErrors, prometheus.CounterValue, float64(g.APIErrors))
	ch <- prometheus.MustNewConstMetric(guardKubelet, prometheus.CounterValue, float64(g.KubeletEv))
	ch <- prometheus.MustNewConstMetric(guardPending, prometheus.GaugeValue, float64(g.Pending))
}
