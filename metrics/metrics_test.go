package metrics_test

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"

	"github.com/nodeguard/nodeguard/cgroups/cgstat"
	"github.com/nodeguard/nodeguard/loader"
	"github.com/nodeguard/nodeguard/loader/event"
	"github.com/nodeguard/nodeguard/metrics"
	"github.com/nodeguard/nodeguard/pressure"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
	"github.com/nodeguard/nodeguard/psi"
)

var update = flag.Bool("update", false, "rewrite testdata/metrics.golden")

type fixedSnapshots struct{ s *pressure.Snapshot }

func (f fixedSnapshots) Scrape() *pressure.Snapshot { return f.s }

type fixedFull struct{ f *pressure.FullStats }

func (f fixedFull) Full() *pressure.FullStats { return f.f }

type fakeKernel struct{}

func (fakeKernel) Stats() ([]loader.RingStats, error) {
	return []loader.RingStats{
		{Ring: "oom", Read: 3, Submitted: 3},
		{Ring: "lifecycle", Read: 1200, Submitted: 1205, ReserveFailed: 5, QueueDropped: 2, Malformed: 1, Delivered: 1197, ReadErrors: 3},
	}, nil
}

func (fakeKernel) Hooks() []loader.HookStatus {
	return []loader.HookStatus{
		{Name: "mark_victim", Family: "oom", Path: loader.PathTPBTF},
		{Name: "cgroup_mkdir", Family: "cgroup", Path: loader.PathTracepoint},
		{Name: "sched_process_exit", Family: "exit", Path: loader.PathOff},
	}
}

func (fakeKernel) ReclaimStats() ([]loader.ReclaimStat, error) {
	return []loader.ReclaimStat{
		{Cgroup: loader.CgroupKey{ID: 42, HierarchyID: 4}, Type: 1, Episodes: 10, Total: 1500 * time.Millisecond},
		{Cgroup: loader.CgroupKey{ID: 0}, Type: 3, Episodes: 2, Total: 250 * time.Millisecond},
		{Cgroup: loader.CgroupKey{ID: 99, HierarchyID: 4}, Type: 1, Episodes: 1, Total: time.Second}, // not monitored: left out
	}, nil
}

type podResolver struct{}

func (podResolver) PodLabels(k pressure.CgroupKey) (metrics.PodLabels, bool) {
	if k.ID == 42 {
		return metrics.PodLabels{Namespace: "default", Pod: "hog", UID: "u-1", QOS: "BestEffort"}, true
	}
	return metrics.PodLabels{}, false
}

func fixture() *pressure.Snapshot {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	line := func(avg float64, total time.Duration) psi.Line { return psi.Line{Avg10: avg, Total: total} }
	mem := cgstat.Memory{Usage: 96 << 20, Limit: 128 << 20, InactiveFile: 16 << 20, Anon: 80 << 20,
		Events: cgstat.MemoryEvents{OOMKill: 2}, Fields: cgstat.FieldPSI}
	mem.PSI = psi.Stats{Some: line(12.5, 3*time.Second), Full: line(7, 2*time.Second), HasSome: true, HasFull: true}
	return &pressure.Snapshot{
		Time: t0, Took: 3 * time.Millisecond,
		Node: pressure.Node{
			PSI: map[psi.Resource]psi.Stats{
				psi.CPU:    {Some: line(1, 10*time.Second), HasSome: true},
				psi.Memory: {Some: line(2, 5*time.Second), Full: line(1, 4*time.Second), HasSome: true, HasFull: true},
				psi.IO:     {Some: line(0, 7*time.Second), Full: line(0, 6*time.Second), HasSome: true, HasFull: true},
			},
			Vmstat: nodestats.Vmstat{OOMKill: 9},
		},
		Signals: []nodestats.Observation{
			{Signal: nodestats.SignalMemoryAvailable, Available: 1 << 30, Capacity: 4 << 30, Time: t0},
			{Signal: nodestats.SignalPIDAvailable, Available: 32000, Capacity: 32768, Time: t0},
		},
		Cgroups: []pressure.Cgroup{
			{Key: pressure.CgroupKey{ID: 42, HierarchyID: 4}, Rel: "/kubepods/besteffort/pod-u-1", Memory: mem,
				CPU: psi.Stats{Some: line(0, time.Second), HasSome: true, HasFull: true}, HasCPU: true},
			{Key: pressure.CgroupKey{ID: 43, HierarchyID: 4}, Rel: "/kubepods/broken", Err: cgstat.ErrMalformed},
		},
	}
}

func newExporter() *metrics.Exporter {
	e := newSensingExporter()
	e.EvictionEventsDropped([]event.Kind{event.KindOOMKill, event.KindCgroupRmdir}, func(k event.Kind) uint64 { return uint64(k) * 10 })
	return e
}

// newSensingExporter is the exporter of `nodeguard metrics`: metrics.New
// over fixed sources, with an event, a snapshot and a wake-up observed.
func newSensingExporter() *metrics.Exporter { return newSensingExporterFor(fixture(), nil) }

// newSensingExporterFor is newSensingExporter over snap, with edit (when
// not nil) changing the options first.
func newSensingExporterFor(snap *pressure.Snapshot, edit func(*metrics.Options)) *metrics.Exporter {
	full := &pressure.FullStats{Time: snap.Time, ByKey: map[pressure.CgroupKey]*cgstat.Full{
		{ID: 42, HierarchyID: 4}: {
			CPU:        &cgstat.CPU{Usage: 12 * time.Second, User: 8 * time.Second, System: 4 * time.Second},
			Throttling: &cgstat.Throttling{Periods: 100, ThrottledPeriods: 7, ThrottledTime: 350 * time.Millisecond},
			Pids:       &cgstat.Pids{Current: 5, Max: cgstat.Unlimited},
			IO:         &cgstat.IO{Devices: []cgstat.IODevice{{Major: 254, Minor: 0, ReadBytes: 4096, WriteBytes: 8192}}},
		},
	}}
	opts := metrics.Options{
		Snapshots: fixedSnapshots{snap}, Full: fixedFull{full}, Kernel: fakeKernel{}, Resolver: podResolver{},
		Storage: fixedStorage{&metrics.StorageSample{Taken: snap.Time, Pods: []metrics.PodStorage{{
			Namespace: "default", Pod: "web", UID: "u-1", EphemeralBytes: 1<<20 + 8192 + 4096,
			Volumes: []metrics.VolumeStorage{
				{Volume: "cache", Plugin: "kubernetes.io~empty-dir", Medium: "", Bytes: 1 << 20, Inodes: 12},
				{Volume: "scratch", Plugin: "kubernetes.io~empty-dir", Medium: "Memory", Bytes: 4 << 20, Inodes: 3},
			},
			Containers: []metrics.ContainerStorage{{Container: "app", RootfsBytes: 8192, RootfsInodes: 4, LogsBytes: 4096}},
		}}}},
		Now: func() time.Time { return snap.Time.Add(1500 * time.Millisecond) }, Version: "test",
	}
	if edit != nil {
		edit(&opts)
	}
	e := metrics.New(opts)
	e.ObserveEvent(&event.OOMKill{Header: event.Header{Kind: event.KindOOMKill}})
	e.ObserveSnapshot(snap)
	e.ObserveWakeup("some 150ms/1s on /proc/pressure/memory")
	return e
}

type fixedStorage struct{ s *metrics.StorageSample }

func (f fixedStorage) LatestStorage() *metrics.StorageSample { return f.s }

func exposition(t *testing.T, e *metrics.Exporter, skip ...string) []byte {
	t.Helper()
	mfs, err := e.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
next:
	for _, mf := range mfs {
		for _, s := range skip {
			if strings.HasPrefix(mf.GetName(), s) {
				continue next
			}
		}
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// TestMetricsGolden pins every series name, label and value for a fixed
// snapshot: renaming a metric breaks dashboards, so it must break this.
func TestMetricsGolden(t *testing.T) {
	got := exposition(t, newExporter(), "nodeguard_scrape_collector_duration_seconds", "nodeguard_snapshot_duration_seconds")
	const path = "testdata/metrics.golden"
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./metrics -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("/metrics differs from %s (go test ./metrics -update if intended):\n%s", path, got)
	}
}

func TestMetricsPassPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (make deps installs Debian's prometheus package)")
	}
	body := exposition(t, newExporter().WithRuntimeCollectors())
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

func TestCollectorsReportFailure(t *testing.T) {
	e := metrics.New(metrics.Options{Snapshots: fixedSnapshots{nil}})
	body := string(exposition(t, e))
	for _, want := range []string{
		`nodeguard_scrape_collector_success{collector="node"} 0`,
		`nodeguard_scrape_collector_success{collector="cgroup"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("without a snapshot, want %q in\n%s", want, body)
		}
	}
}

func TestEvictionSeries(t *testing.T) {
	e := metrics.New(metrics.Options{Snapshots: fixedSnapshots{nil}})
	ev := e.Eviction()
	ev.Evicted("memory.available", false, map[string]time.Duration{metrics.StageDetect: 2 * time.Millisecond, metrics.StageKill: time.Millisecond})
	ev.Evicted("memory.available", true, nil)
	ev.Released(80*time.Millisecond, 90*time.Millisecond)
	ev.Staleness(3 * time.Millisecond)
	ev.Condition("MemoryPressure", true)
	ev.OOMKill("default", "hog")
	body := string(exposition(t, e))
	for _, want := range []string{
		`kubelet_evictions{eviction_signal="memory.available"} 1`,
		`nodeguard_eviction_dry_run_total{eviction_signal="memory.available"} 1`,
		`nodeguard_eviction_latency_seconds_count{stage="detect"} 1`,
		`nodeguard_eviction_latency_seconds_count{stage="release"} 1`,
		`nodeguard_decision_staleness_seconds 0.003`,
		`nodeguard_node_condition{condition="MemoryPressure"} 1`,
		`nodeguard_node_condition{condition="PIDPressure"} 0`,
		`nodeguard_oom_kills_attributed_total{namespace="default",pod="hog"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("want %q in\n%s", want, body)
		}
	}
}

func TestGCSeries(t *testing.T) {
	e := metrics.New(metrics.Options{Snapshots: fixedSnapshots{nil}})
	gc := e.GC()
	body := string(exposition(t, e))
	for _, want := range []string{
		`kubelet_image_garbage_collected_total{reason="space"} 0`,
		`nodeguard_image_gc_freed_bytes_total 0`,
		`nodeguard_container_gc_removed_total{kind="sandbox"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("before any removal, want %q in\n%s", want, body)
		}
	}
	gc.ImageRemoved(4096)
	gc.ImageRemoved(1024)
	gc.ContainersRemoved(3, 1)
	gc.Reclaimed("imagefs.available")
	body = string(exposition(t, e))
	for _, want := range []string{
		`kubelet_image_garbage_collected_total{reason="space"} 2`,
		`nodeguard_image_gc_freed_bytes_total 5120`,
		`nodeguard_container_gc_removed_total{kind="container"} 3`,
		`nodeguard_container_gc_removed_total{kind="sandbox"} 1`,
		`nodeguard_node_reclaim_total{eviction_signal="imagefs.available"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("want %q in\n%s", want, body)
		}
	}
}

// TestRingAccountingIsExported: every number of a ring's accounting is a
// series, so that read = delivered + queue_full + malformed, and submitted
// - read (the backlog still in the ring), can be checked from /metrics.
func TestRingAccountingIsExported(t *testing.T) {
	body := string(exposition(t, newExporter()))
	for _, want := range []string{
		`nodeguard_bpf_ring_submitted_total{ring="lifecycle"} 1205`,
		`nodeguard_bpf_ring_records_total{ring="lifecycle"} 1200`,
		`nodeguard_bpf_ring_delivered_total{ring="lifecycle"} 1197`,
		`nodeguard_bpf_ring_lost_total{reason="reserve_failed",ring="lifecycle"} 5`,
		`nodeguard_bpf_ring_lost_total{reason="queue_full",ring="lifecycle"} 2`,
		`nodeguard_bpf_ring_lost_total{reason="malformed",ring="lifecycle"} 1`,
		`nodeguard_bpf_ring_read_errors_total{ring="lifecycle"} 3`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("want %q in /metrics", want)
		}
	}
}
