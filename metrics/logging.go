package metrics

import "github.com/prometheus/client_golang/prometheus"

// LogDropped registers nodeguard_log_dropped_total, read from dropped at
// every scrape: the log records the agent lost because its output was too
// slow (the logger drops rather than block, see internal/logging).
func (e *Exporter) LogDropped(dropped func() uint64) {
	e.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "nodeguard_log_dropped_total",
		Help: "Log records dropped because the log output was too slow (logging never blocks the agent).",
	}, func() float64 { return float64(dropped()) }))
}
