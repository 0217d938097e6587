package loader_test

import (
	"context"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/bench"
	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/loader"
)

func benchPipeline(b *testing.B) *loader.Pipeline {
	cgtest.RequirePrivileged(b)
	p, err := loader.Open(loader.Options{
		Families:  []string{loader.FamilyBench},
		RingSizes: map[loader.Ring]int{loader.RingBench: 4 << 20},
		QueueSize: 32768,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	return p
}

// BenchmarkPipelineLatency: one event at a time, BPF timestamp to consumer.
func BenchmarkPipelineLatency(b *testing.B) {
	p := benchPipeline(b)
	samples := make([]time.Duration, 0, 1<<16)
	for b.Loop() {
		if err := p.BenchTrigger(1); err != nil {
			b.Fatal(err)
		}
		ev := <-p.Events()
		samples = append(samples, time.Duration(bench.MonotonicNow()-ev.Hdr().TimestampNS))
	}
	s := bench.Summarize(samples)
	b.ReportMetric(float64(s.P50.Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(s.P99.Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(s.Max.Nanoseconds()), "max-ns")
}

// BenchmarkPipelineThroughput: the whole pipeline with zero loss, b.N
// events per run; reports events/s and anything lost.
func BenchmarkPipelineThroughput(b *testing.B) {
	p := benchPipeline(b)
	n := max(b.N, 1024)
	cfg := bench.EventsConfig{LatencySamples: 1, ThroughputEvents: n, Batch: 256, Window: 16384, SkipDecode: true}
	b.ResetTimer()
	res, err := bench.RunEvents(context.Background(), p, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(res.PerSecond, "events/s")
	b.ReportMetric(float64(res.Lost), "lost")
	if res.Lost != 0 || res.Gaps != 0 {
		b.Errorf("lost %d, gaps %d: the windowed pipeline must not lose", res.Lost, res.Gaps)
	}
}
