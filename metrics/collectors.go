package metrics

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodeguard/nodeguard/cgroups/cgstat"
	"github.com/nodeguard/nodeguard/loader"
	"github.com/nodeguard/nodeguard/pressure"
	"github.com/nodeguard/nodeguard/psi"
)

var (
	collectorDuration = prometheus.NewDesc("nodeguard_scrape_collector_duration_seconds",
		"Time a collector took in this scrape.", []string{"collector"}, nil)
	collectorSuccess = prometheus.NewDesc("nodeguard_scrape_collector_success",
		"Whether a collector succeeded in this scrape (1) or not (0).", []string{"collector"}, nil)

	// node_exporter's pressure collector names (collector/pressure_linux.go).
	nodePSI = map[psi.Resource][2]*prometheus.Desc{
		psi.CPU: {
			prometheus.NewDesc("node_pressure_cpu_waiting_seconds_total", "Total time in seconds that processes have waited for CPU time", nil, nil),
			prometheus.NewDesc("node_pressure_cpu_stalled_seconds_total", "Total time in seconds no process could make progress due to CPU congestion", nil, nil),
		},
		psi.Memory: {
			prometheus.NewDesc("node_pressure_memory_waiting_seconds_total", "Total time in seconds that processes have waited for memory", nil, nil),
			prometheus.NewDesc("node_pressure_memory_stalled_seconds_total", "Total time in seconds no process could make progress due to memory congestion", nil, nil),
		},
		psi.IO: {
			prometheus.NewDesc("node_pressure_io_waiting_seconds_total", "Total time in seconds that processes have waited due to IO congestion", nil, nil),
			prometheus.NewDesc("node_pressure_io_stalled_seconds_total", "Total time in seconds no process could make progress due to IO congestion", nil, nil),
		},
	}

	signalAvailable = prometheus.NewDesc("nodeguard_node_signal_available",
		"Eviction signal: what is available, computed as the kubelet computes it (bytes, inodes or pids).", []string{"signal"}, nil)
	signalCapacity = prometheus.NewDesc("nodeguard_node_signal_capacity",
		"Eviction signal: the capacity the available amount is out of.", []string{"signal"}, nil)
	nodeOOMKills = prometheus.NewDesc("nodeguard_node_oom_kills_total",
		"OOM kills on the node (/proc/vmstat oom_kill).", nil, nil)
	snapshotAge = prometheus.NewDesc("nodeguard_snapshot_age_seconds",
		"Age of the newest pressure snapshot.", nil, nil)
	cgroupsMonitored = prometheus.NewDesc("nodeguard_cgroups_monitored",
		"Cgroups read in the newest snapshot.", nil, nil)

	cgLabels = []string{"id", "namespace", "pod", "uid", "container", "qos"}
	// cAdvisor's names (metrics/prometheus.go).
	cgPSI = map[string][2]*prometheus.Desc{
		"cpu": {
			prometheus.NewDesc("container_pressure_cpu_waiting_seconds_total", "Total time duration tasks in the container have waited due to CPU congestion.", cgLabels, nil),
			prometheus.NewDesc("container_pressure_cpu_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to CPU congestion.", cgLabels, nil),
		},
		"memory": {
			prometheus.NewDesc("container_pressure_memory_waiting_seconds_total", "Total time duration tasks in the container have waited due to memory congestion.", cgLabels, nil),
			prometheus.NewDesc("container_pressure_memory_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to memory congestion.", cgLabels, nil),
		},
		"io": {
			prometheus.NewDesc("container_pressure_io_waiting_seconds_total", "Total time duration tasks in the container have waited due to IO congestion.", cgLabels, nil),
			prometheus.NewDesc("container_pressure_io_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to IO congestion.", cgLabels, nil),
		},
	}
	cgWorkingSet = prometheus.NewDesc("container_memory_working_set_bytes", "Current working set of the container in bytes", cgLabels, nil)
	cgUsage      = prometheus.NewDesc("container_memory_usage_bytes", "Current memory usage in bytes, including all memory regardless of when it was accessed", cgLabels, nil)
	cgOOM        = prometheus.NewDesc("container_oom_events_total", "Count of out of memory events observed for the container", cgLabels, nil)
	cgLimit      = prometheus.NewDesc("nodeguard_cgroup_memory_limit_bytes", "The cgroup's own hard memory limit (absent when unlimited).", cgLabels, nil)

	// cAdvisor's names for the full statistics.
	cgCPUUsage     = prometheus.NewDesc("container_cpu_usage_seconds_total", "Cumulative cpu time consumed in seconds.", cgLabels, nil)
	cgCPUUser      = prometheus.NewDesc("container_cpu_user_seconds_total", "Cumulative user cpu time consumed in seconds.", cgLabels, nil)
	cgCPUSystem    = prometheus.NewDesc("container_cpu_system_seconds_total", "Cumulative system cpu time consumed in seconds.", cgLabels, nil)
	cgCFSPeriods   = prometheus.NewDesc("container_cpu_cfs_periods_total", "Number of elapsed enforcement period intervals.", cgLabels, nil)
	cgCFSThrottled = prometheus.NewDesc("container_cpu_cfs_throttled_periods_total", "Number of throttled period intervals.", cgLabels, nil)
	cgCFSThrottleS = prometheus.NewDesc("container_cpu_cfs_throttled_seconds_total", "Total time duration the container has been throttled.", cgLabels, nil)
	cgThreads      = prometheus.NewDesc("container_threads", "Number of threads running inside the container", cgLabels, nil)
	cgThreadsMax   = prometheus.NewDesc("container_threads_max", "Maximum number of threads allowed inside the container, infinity if value is zero", cgLabels, nil)
	cgBlkio        = prometheus.NewDesc("container_blkio_device_usage_total", "Blkio Device bytes usage", append([]string{"device", "major", "minor", "operation"}, cgLabels...), nil)
	fullAge        = prometheus.NewDesc("nodeguard_full_stats_age_seconds", "Age of the newest full cgroup statistics (cpu, io, pids).", nil, nil)

	// A ring's accounting: submitted (kernel) = read + still in the
	// ring; read = delivered + lost to queue_full and malformed.
	ringSubmitted = prometheus.NewDesc("nodeguard_bpf_ring_submitted_total",
		"Records the BPF programs submitted to a ring buffer (counted in the kernel, summed over CPUs).", []string{"ring"}, nil)
	ringRecords   = prometheus.NewDesc("nodeguard_bpf_ring_records_total", "Records read from a ring buffer.", []string{"ring"}, nil)
	ringDelivered = prometheus.NewDesc("nodeguard_bpf_ring_delivered_total",
		"Records read from a ring buffer and handed to the consumer queue.", []string{"ring"}, nil)
	ringReadErrors = prometheus.NewDesc("nodeguard_bpf_ring_read_errors_total",
		"Failed reads of a ring buffer (the reader retries after 10 ms).", []string{"ring"}, nil)
	ringLost = prometheus.NewDesc("nodeguard_bpf_ring_lost_total",
		"Kernel events lost, by ring and reason: reserve_failed (ring full, counted in the kernel), queue_full (consumer queue full), malformed.", []string{"ring", "reason"}, nil)
	hookAttached = prometheus.NewDesc("nodeguard_bpf_hook_attached",
		"1 for the path each hook is attached on (tp_btf, tracepoint, or off).", []string{"hook", "family", "path"}, nil)
	reclaimStall = prometheus.NewDesc("nodeguard_reclaim_stall_seconds_total",
		"Time tasks spent stalled in memory reclaim, from the eBPF aggregates, by cgroup and type (memcg, direct, kswapd).", append([]string{"type"}, cgLabels...), nil)
	reclaimEpisodes = prometheus.NewDesc("nodeguard_reclaim_episodes_total",
		"Memory reclaim episodes, from the eBPF aggregates.", append([]string{"type"}, cgLabels...), nil)
)

// scrapeCollector runs nodeguard's collectors at scrape time from the
// newest snapshot and the kernel counters.
type scrapeCollector struct{ e *Exporter }

func newScrapeCollector(e *Exporter) prometheus.Collector { return &scrapeCollector{e: e} }

// Describe sends nothing: the collector is unchecked, its series depend on
// what the host supports.
func (c *scrapeCollector) Describe(chan<- *prometheus.Desc) {}

func (c *scrapeCollector) Collect(ch chan<- prometheus.Metric) {
	snap := c.e.opts.Snapshots.Scrape()
	run := func(name string, fn func() error) {
		start := time.Now()
		err := fn()
		ok := 1.0
		if err != nil {
			ok = 0
		}
		ch <- prometheus.MustNewConstMetric(collectorDuration, prometheus.GaugeValue, time.Since(start).Seconds(), name)
		ch <- prometheus.MustNewConstMetric(collectorSuccess, prometheus.GaugeValue, ok, name)
	}
	run("node", func() error { return c.node(ch, snap) })
	run("cgroup", func() error { return c.cgroups(ch, snap) })
	if c.e.opts.Full != nil {
		run("cgroup_full", func() error { return c.full(ch, snap) })
	}
	if c.e.opts.Kernel != nil {
		run("bpf", func() error { return c.bpf(ch, snap) })
	}
	if c.e.opts.Storage != nil {
		run("storage", func() error { return c.storage(ch) })
	}
}

var errNoSnapshot = errors.New("no snapshot yet")

func (c *scrapeCollector) node(ch chan<- prometheus.Metric, snap *pressure.Snapshot) error {
	if snap == nil {
		return errNoSnapshot
	}
	ch <- prometheus.MustNewConstMetric(snapshotAge, prometheus.GaugeValue, c.e.opts.Now().Sub(snap.Time).Seconds())
	ch <- prometheus.MustNewConstMetric(cgroupsMonitored, prometheus.GaugeValue, float64(len(snap.Cgroups)))
	for r, descs := range nodePSI {
		st, ok := snap.Node.PSI[r]
		if !ok {
			continue
		}
		if st.HasSome {
			ch <- prometheus.MustNewConstMetric(descs[0], prometheus.CounterValue, st.Some.Total.Seconds())
		}
		if st.HasFull {
			ch <- prometheus.MustNewConstMetric(descs[1], prometheus.CounterValue, st.Full.Total.Seconds())
		}
	}
	for _, o := range snap.Signals {
		ch <- prometheus.MustNewConstMetric(signalAvailable, prometheus.GaugeValue, float64(o.Available), string(o.Signal))
		ch <- prometheus.MustNewConstMetric(signalCapacity, prometheus.GaugeValue, float64(o.Capacity), string(o.Signal))
	}
	ch <- prometheus.MustNewConstMetric(nodeOOMKills, prometheus.CounterValue, float64(snap.Node.Vmstat.OOMKill))
	if len(snap.Errors) > 0 {
		return fmt.Errorf("snapshot: %w", errors.Join(snap.Errors...))
	}
	return nil
}

func (c *scrapeCollector) labels(key pressure.CgroupKey, rel string) []string {
	var pl PodLabels
	if c.e.opts.Resolver != nil {
		pl, _ = c.e.opts.Resolver.PodLabels(key)
	}
	return []string{rel, pl.Namespace, pl.Pod, pl.UID, pl.Container, pl.QOS}
}

func (c *scrapeCollector) cgroups(ch chan<- prometheus.Metric, snap *pressure.Snapshot) error {
	if snap == nil {
		return errNoSnapshot
	}
	var errs []error
	for i := range snap.Cgroups {
		cg := &snap.Cgroups[i]
		if cg.Err != nil {
			errs = append(errs, cg.Err)
			continue
		}
		lv := c.labels(cg.Key, cg.Rel)
		m := &cg.Memory
		ch <- prometheus.MustNewConstMetric(cgWorkingSet, prometheus.GaugeValue, float64(m.WorkingSet()), lv...)
		ch <- prometheus.MustNewConstMetric(cgUsage, prometheus.GaugeValue, float64(m.Usage), lv...)
		ch <- prometheus.MustNewConstMetric(cgOOM, prometheus.CounterValue, float64(m.Events.OOMKill), lv...)
		if m.Limit != cgstat.Unlimited {
			ch <- prometheus.MustNewConstMetric(cgLimit, prometheus.GaugeValue, float64(m.Limit), lv...)
		}
		if m.Fields.Has(cgstat.FieldPSI) {
			ch <- prometheus.MustNewConstMetric(cgPSI["memory"][0], prometheus.CounterValue, m.PSI.Some.Total.Seconds(), lv...)
			ch <- prometheus.MustNewConstMetric(cgPSI["memory"][1], prometheus.CounterValue, m.PSI.Full.Total.Seconds(), lv...)
		}
		if cg.HasCPU {
			ch <- prometheus.MustNewConstMetric(cgPSI["cpu"][0], prometheus.CounterValue, cg.CPU.Some.Total.Seconds(), lv...)
			if cg.CPU.HasFull {
				ch <- prometheus.MustNewConstMetric(cgPSI["cpu"][1], prometheus.CounterValue, cg.CPU.Full.Total.Seconds(), lv...)
			}
		}
		if cg.HasIO {
			ch <- prometheus.MustNewConstMetric(cgPSI["io"][0], prometheus.CounterValue, cg.IO.Some.Total.Seconds(), lv...)
			ch <- prometheus.MustNewConstMetric(cgPSI["io"][1], prometheus.CounterValue, cg.IO.Full.Total.Seconds(), lv...)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%d cgroups unreadable: %w", len(errs), errs[0])
	}
	return nil
}

func (c *scrapeCollector) full(ch chan<- prometheus.Metric, snap *pressure.Snapshot) error {
	fs := c.e.opts.Full.Full()
	if fs == nil || snap == nil {
		return errNoSnapshot
	}
	ch <- prometheus.MustNewConstMetric(fullAge, prometheus.GaugeValue, c.e.opts.Now().Sub(fs.Time).Seconds())
	for i := range snap.Cgroups {
		cg := &snap.Cgroups[i]
		f, ok := fs.ByKey[cg.Key]
		if !ok {
			continue
		}
		lv := c.labels(cg.Key, cg.Rel)
		if f.CPU != nil {
			ch <- prometheus.MustNewConstMetric(cgCPUUsage, prometheus.CounterValue, f.CPU.Usage.Seconds(), lv...)
			ch <- prometheus.MustNewConstMetric(cgCPUUser, prometheus.CounterValue, f.CPU.User.Seconds(), lv...)
			ch <- prometheus.MustNewConstMetric(cgCPUSystem, prometheus.CounterValue, f.CPU.System.Seconds(), lv...)
		}
		if f.Throttling != nil {
			ch <- prometheus.MustNewConstMetric(cgCFSPeriods, prometheus.CounterValue, float64(f.Throttling.Periods), lv...)
			ch <- prometheus.MustNewConstMetric(cgCFSThrottled, prometheus.CounterValue, float64(f.Throttling.ThrottledPeriods), lv...)
			ch <- prometheus.MustNewConstMetric(cgCFSThrottleS, prometheus.CounterValue, f.Throttling.ThrottledTime.Seconds(), lv...)
		}
		if f.Pids != nil {
			ch <- prometheus.MustNewConstMetric(cgThreads, prometheus.GaugeValue, float64(f.Pids.Current), lv...)
			max := 0.0 // cAdvisor: zero means unlimited
			if f.Pids.Max != cgstat.Unlimited {
				max = float64(f.Pids.Max)
			}
			ch <- prometheus.MustNewConstMetric(cgThreadsMax, prometheus.GaugeValue, max, lv...)
		}
		if f.IO != nil {
			for _, d := range f.IO.Devices {
				dev := fmt.Sprintf("%d:%d", d.Major, d.Minor)
				maj, min := fmt.Sprint(d.Major), fmt.Sprint(d.Minor)
				for _, op := range []struct {
					name string
					v    uint64
				}{{"Read", d.ReadBytes}, {"Write", d.WriteBytes}} {
					ch <- prometheus.MustNewConstMetric(cgBlkio, prometheus.CounterValue, float64(op.v), append([]string{dev, maj, min, op.name}, lv...)...)
				}
			}
		}
	}
	if fs.Errors > 0 {
		return fmt.Errorf("%d cgroups without full statistics", fs.Errors)
	}
	return nil
}

var reclaimTypes = map[uint32]string{1: "memcg", 2: "direct", 3: "kswapd"}

func (c *scrapeCollector) bpf(ch chan<- prometheus.Metric, snap *pressure.Snapshot) error {
	k := c.e.opts.Kernel
	for _, h := range k.Hooks() {
		for _, p := range []loader.AttachPath{loader.PathTPBTF, loader.PathTracepoint, loader.PathOff} {
			v := 0.0
			if h.Path == p {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(hookAttached, prometheus.GaugeValue, v, h.Name, h.Family, string(p))
		}
	}
	var errs []error
	rings, err := k.Stats()
	if err != nil {
		errs = append(errs, err)
	}
	for _, r := range rings {
		ch <- prometheus.MustNewConstMetric(ringSubmitted, prometheus.CounterValue, float64(r.Submitted), r.Ring)
		ch <- prometheus.MustNewConstMetric(ringRecords, prometheus.CounterValue, float64(r.Read), r.Ring)
		ch <- prometheus.MustNewConstMetric(ringDelivered, prometheus.CounterValue, float64(r.Delivered), r.Ring)
		ch <- prometheus.MustNewConstMetric(ringReadErrors, prometheus.CounterValue, float64(r.ReadErrors), r.Ring)
		ch <- prometheus.MustNewConstMetric(ringLost, prometheus.CounterValue, float64(r.ReserveFailed), r.Ring, "reserve_failed")
		ch <- prometheus.MustNewConstMetric(ringLost, prometheus.CounterValue, float64(r.QueueDropped), r.Ring, "queue_full")
		ch <- prometheus.MustNewConstMetric(ringLost, prometheus.CounterValue, float64(r.Malformed), r.Ring, "malformed")
	}
	stats, err := k.ReclaimStats()
	if err != nil && !errors.Is(err, loader.ErrNotLoaded) {
		errs = append(errs, err)
	}
	// Label reclaim aggregates with the cgroup's path from the snapshot.
	rels := map[pressure.CgroupKey]string{}
	if snap != nil {
		for i := range snap.Cgroups {
			rels[snap.Cgroups[i].Key] = snap.Cgroups[i].Rel
		}
	}
	for _, s := range stats {
		typ := reclaimTypes[s.Type]
		key := pressure.CgroupKey{ID: s.Cgroup.ID, HierarchyID: s.Cgroup.HierarchyID}
		var lv []string
		if s.Type == 3 {
			lv = []string{fmt.Sprintf("node%d", s.Cgroup.ID), "", "", "", "", ""}
		} else {
			rel, ok := rels[key]
			if !ok {
				continue // not monitored (any more)
			}
			lv = c.labels(key, rel)
		}
		lv = append([]string{typ}, lv...)
		ch <- prometheus.MustNewConstMetric(reclaimStall, prometheus.CounterValue, s.Total.Seconds(), lv...)
		ch <- prometheus.MustNewConstMetric(reclaimEpisodes, prometheus.CounterValue, float64(s.Episodes), lv...)
	}
	return errors.Join(errs...)
}
