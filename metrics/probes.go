package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// proberProbeTotal is the kubelet's own name and labels, so that
// dashboards made for it work here.
var proberProbeTotal = prometheus.NewDesc("prober_probe_total",
	"Cumulative number of a liveness, readiness or startup probe for a container by result.",
	[]string{"probe_type", "result", "container", "pod", "namespace"}, nil)

// ProbeSeries is one series of prober_probe_total.
type ProbeSeries struct {
	ProbeType, Result, Container, Pod, Namespace string
	Value                                        uint64
}

// ProbeResults registers prober_probe_total, read from read at every
// scrape (the pod manager's probe counts; a removed pod's series go).
func (e *Exporter) ProbeResults(read func() []ProbeSeries) {
	e.reg.MustRegister(probeCollector(read))
}

type probeCollector func() []ProbeSeries

func (c probeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- proberProbeTotal }

func (c probeCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c() {
		ch <- prometheus.MustNewConstMetric(proberProbeTotal, prometheus.CounterValue, float64(s.Value),
			s.ProbeType, s.Result, s.Container, s.Pod, s.Namespace)
	}
}
