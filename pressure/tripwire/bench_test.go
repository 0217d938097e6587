package tripwire

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

// BenchmarkTripwireLatency measures, per iteration, the time from the
// hog's first read of its cgroup's usage at or above the threshold to
// Fire.At, on this host's mechanism (v1 usage threshold, or v2 memory.high).
// The hog touches 64 KiB between reads, so its reading lags the charge
// that crossed by at most one step (~20-40 µs here); a negative latency
// means the fire came before that read. It reports p50, p99 and max in
// µs. Iterations are slow (a 16-20 MiB allocation and release): run with
// e.g. -benchtime 300x.
func BenchmarkTripwireLatency(b *testing.B) {
	sb := cgtest.New(b, cgtest.WithMemoryLimit(sandboxLimit))
	dir := sb.MemoryDir()
	v2 := sb.Layout().Memory.V2()
	usageFile, over := fileUsage, uint64(4<<20)
	if v2 {
		// Above memory.high the hog is throttled: stay 1 MiB past it.
		usageFile, over = fileCurrent, 1<<20
	}
	h := startHog(b, sb, filepath.Join(dir, usageFile), 64)
	clock := newMonoClock()
	tw, err := New(dir, v2, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tw.Close() })
	base := h.down(b)
	threshold := base + 16<<20
	if err := tw.Arm(threshold); err != nil {
		b.Fatal(err)
	}
	lats := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		// On v2 the kernel keeps raising "high" events while the hog
		// is above memory.high (one fire per notification, some
		// deferred by the kernel's 10 ms rate limit): only a fire seen
		// after this iteration's "up" was sent counts.
		sent := time.Now()
		r := h.up(b, threshold+over, threshold, 64<<10)
		if r.Cross == 0 {
			b.Fatalf("hog never reached the threshold: %+v", r)
		}
		timeout := time.After(2 * time.Second)
	wait:
		for {
			select {
			case f := <-tw.C():
				if f.At.After(sent) {
					lats = append(lats, time.Duration(clock.of(f.At)-r.Cross))
					break wait
				}
			case <-timeout:
				b.Fatalf("no fire within 2s; stats %+v", tw.Stats())
			}
		}
		d := tw.Stats().Downward
		h.down(b)
		if !v2 {
			// Wait for the kernel's downward crossing, so that the
			// next iteration crosses upward again.
			deadline := time.Now().Add(2 * time.Second)
			for tw.Stats().Downward == d && time.Now().Before(deadline) {
				time.Sleep(100 * time.Microsecond)
			}
		} else {
			// The kernel notifies a cgroup file at most every 10 ms;
			// let the last notification of this iteration arrive.
			time.Sleep(11 * time.Millisecond)
		}
	}
	b.StopTimer()
	slices.Sort(lats)
	q := func(p float64) float64 {
		return float64(lats[min(len(lats)-1, int(p*float64(len(lats))))]) / float64(time.Microsecond)
	}
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
	b.ReportMetric(q(1), "max-µs")
	b.ReportMetric(0, "ns/op")
	s := tw.Stats()
	b.Logf("%d fires (v2 %v): p50 %.0f µs, p99 %.0f µs, min %v, max %v; stats %+v", len(lats), v2, q(0.5), q(0.99), lats[0], lats[len(lats)-1], s)
}

// BenchmarkWorkingSetIdle measures the CPU the working-set poll costs this
// process on an idle node (line 1 GiB away: a tick every MaxPeriod), on a
// fake cgroup directory, so it runs anywhere: the ticks' own cost, not the
// kernel's generation of memory.current (BenchmarkV2Mechanisms measures
// that on real cgroups in the VM lane). "none" is the same process without
// a tripwire. Each iteration is one second.
func BenchmarkWorkingSetIdle(b *testing.B) {
	for _, armed := range []bool{false, true} {
		name := "none"
		if armed {
			name = "working_set"
		}
		b.Run(name, func(b *testing.B) { benchIdle(b, armed) })
	}
}

func benchIdle(b *testing.B, armed bool) {
	dir := b.TempDir()
	for name, content := range map[string]string{
		fileHigh: "max\n", fileCurrent: "0104857600\n", fileEventsLocal: events(0, 0), fileStat: stat(0),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	var tw Tripwire
	if armed {
		var err error
		if tw, err = New(dir, true, Options{}); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { tw.Close() })
		if err := tw.Arm(100<<20 + 1<<30); err != nil {
			b.Fatal(err)
		}
	}
	ticks := func() uint64 {
		if tw == nil {
			return 0
		}
		return tw.Stats().Ignored
	}
	time.Sleep(200 * time.Millisecond)
	cpu0, t0, ticks0 := cpuTime(), time.Now(), ticks()
	for b.Loop() {
		time.Sleep(time.Second)
	}
	wall := time.Since(t0)
	n := ticks() - ticks0
	cpu := cpuTime() - cpu0
	b.ReportMetric(float64(cpu)/float64(wall)*100, "cpu-%")
	b.ReportMetric(float64(n)/wall.Seconds(), "ticks/s")
	b.ReportMetric(0, "ns/op")
}
