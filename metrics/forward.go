package metrics

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodeguard/nodeguard/loader/event"
)

var evictionEventsDropped = prometheus.NewDesc("nodeguard_eviction_events_dropped_total",
	"Kernel events the pipeline delivered that the eviction manager never received because its queue was full, by kind (the safety tick and the release poll still run).",
	[]string{"kind"}, nil)

// EvictionEventsDropped registers nodeguard_eviction_events_dropped_total,
// one series per kind of kinds, read from dropped at every scrape: the
// kernel events handed towards the eviction manager that its full queue
// turned away. These are past the rings' accounting (counted there as
// delivered), so they are a series of their own.
func (e *Exporter) EvictionEventsDropped(kinds []event.Kind, dropped func(event.Kind) uint64) {
	e.reg.MustRegister(droppedCollector{kinds: slices.Clone(kinds), dropped: dropped})
}

type droppedCollector struct {
	kinds   []event.Kind
	dropped func(event.Kind) uint64
}

func (c droppedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- evictionEventsDropped }

func (c droppedCollector) Collect(ch chan<- prometheus.Metric) {
	for _, k := range c.kinds {
		ch <- prometheus.MustNewConstMetric(evictionEventsDropped, prometheus.CounterValue, float64(c.dropped(k)), k.String())
	}
}
