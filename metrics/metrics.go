package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodeguard/nodeguard/loader"
	"github.com/nodeguard/nodeguard/loader/event"
	"github.com/nodeguard/nodeguard/pressure"
)

// SnapshotSource hands out the snapshot a scrape reports: the newest,
// with every cgroup's readings recent, read for the scrape if need be
// (pressure.Sensor.Scrape); nil before the first.
type SnapshotSource interface {
	Scrape() *pressure.Snapshot
}

// FullSource hands out full statistics (cpu, io, pids) for a scrape:
// recent ones, read for it if need be; nil before the first snapshot.
type FullSource interface {
	Full() *pressure.FullStats
}

// KernelSource is the loaded event pipeline.
type KernelSource interface {
	Stats() ([]loader.RingStats, error)
	Hooks() []loader.HookStatus
	ReclaimStats() ([]loader.ReclaimStat, error)
}

// PodLabels are the Kubernetes labels of a cgroup's series.
type PodLabels struct {
	Namespace, Pod, UID, Container, QOS string
}

// Resolver maps a cgroup (its memory cgroup key) to pod labels. The
// lifecycle fills it; until then every cgroup resolves to nothing.
type Resolver interface {
	PodLabels(key pressure.CgroupKey) (PodLabels, bool)
}

// Options wire the exporter.
type Options struct {
	Snapshots SnapshotSource
	Full      FullSource    // nil: no cpu, io and pids series
	Kernel    KernelSource  // nil: no BPF series
	Resolver  Resolver      // nil: cgroup path labels only
	Storage   StorageSource // nil: no ephemeral storage series
	// Clock for nodeguard_snapshot_age_seconds.
	Now func() time.Time
	// Version for nodeguard_build_info.
	Version string
}

// Exporter owns nodeguard's metrics registry.
type Exporter struct {
	reg  *prometheus.Registry
	opts Options

	events   *prometheus.CounterVec
	snapDur  prometheus.Histogram
	snapErrs *prometheus.CounterVec
	wakeups  *prometheus.CounterVec
}

// New builds the registry: nodeguard's collectors plus the Go and process
// collectors.
func New(opts Options) *Exporter {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	e := &Exporter{reg: prometheus.NewRegistry(), opts: opts}
	e.events = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeguard_bpf_events_total",
		Help: "Kernel events delivered by the eBPF pipeline, by kind.",
	}, []string{"kind"})
	e.snapDur = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "nodeguard_snapshot_duration_seconds",
		Help: "Time to read one pressure snapshot of the node and every monitored cgroup.",
		// 250 µs to ~1 s: a snapshot of hundreds of cgroups takes a few ms.
		Buckets: prometheus.ExponentialBuckets(0.00025, 2, 13),
	})
	e.snapErrs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeguard_snapshot_errors_total",
		Help: "Statistics that could not be read in a snapshot, by scope (node or cgroup).",
	}, []string{"scope"})
	e.wakeups = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeguard_psi_trigger_wakeups_total",
		Help: "PSI trigger wake-ups delivered, by trigger.",
	}, []string{"trigger"})
	for _, k := range []event.Kind{event.KindOOMKill, event.KindReclaim, event.KindCgroupMkdir, event.KindCgroupRmdir, event.KindOOMScoreAdj, event.KindExit} {
		e.events.WithLabelValues(k.String())
	}
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "nodeguard_build_info",
		Help:        "nodeguard's version; always 1.",
		ConstLabels: prometheus.Labels{"version": opts.Version},
	})
	build.Set(1)
	e.reg.MustRegister(e.events, e.snapDur, e.snapErrs, e.wakeups, build)
	e.reg.MustRegister(newScrapeCollector(e))
	return e
}

// WithRuntimeCollectors adds the Go and process collectors (left out of
// the golden test, whose values they would make unstable).
func (e *Exporter) WithRuntimeCollectors() *Exporter {
	e.reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return e
}

// Registry is what the HTTP handler serves.
func (e *Exporter) Registry() *prometheus.Registry { return e.reg }

// ObserveEvent counts one delivered kernel event.
func (e *Exporter) ObserveEvent(ev event.Event) {
	e.events.WithLabelValues(ev.Hdr().Kind.String()).Inc()
}

// ObserveSnapshot records a snapshot's duration and errors.
func (e *Exporter) ObserveSnapshot(s *pressure.Snapshot) {
	e.snapDur.Observe(s.Took.Seconds())
	if n := len(s.Errors); n > 0 {
		e.snapErrs.WithLabelValues("node").Add(float64(n))
	}
	var bad int
	for i := range s.Cgroups {
		if s.Cgroups[i].Err != nil {
			bad++
		}
	}
	if bad > 0 {
		e.snapErrs.WithLabelValues("cgroup").Add(float64(bad))
	}
}

// ObserveWakeup counts one PSI trigger wake-up.
func (e *Exporter) ObserveWakeup(trigger string) {
	e.wakeups.WithLabelValues(trigger).Inc()
}
