package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/loader"
	"github.com/nodeguard/nodeguard/loader/event"
)

// EventSource is the loaded pipeline with the bench family: it writes n
// synthetic records into the bench ring from the calling thread's syscall
// and delivers them, decoded, on Events.
type EventSource interface {
	BenchTrigger(n int) error
	Events() <-chan event.Event
	Stats() ([]loader.RingStats, error)
}

// EventsConfig chooses the scenario of RunEvents.
type EventsConfig struct {
	// LatencySamples single events, each triggered after the previous one
	// arrived: kernel timestamp to consumer.
	LatencySamples int
	// ThroughputEvents in batches of Batch, with at most Window in flight
	// so that the ring never overflows (the figure is the rate sustained
	// with zero loss).
	ThroughputEvents int
	Batch            int
	Window           int
	// Progress, when set, receives one line per phase.
	Progress io.Writer
	// SkipDecode leaves out the decode micro-benchmark (it cannot run
	// inside a `go test -bench` benchmark, which has its own).
	SkipDecode bool
}

// DefaultEventsConfig is what `nodeguard bench events` runs.
func DefaultEventsConfig() EventsConfig {
	return EventsConfig{LatencySamples: 20000, ThroughputEvents: 2_000_000, Batch: 256, Window: 16384}
}

// EventsResult is what RunEvents measured.
type EventsResult struct {
	Latency   Summary
	Samples   []time.Duration
	Events    int
	Elapsed   time.Duration
	PerSecond float64
	// Lost counts bench records lost anywhere (ring reservation, queue,
	// malformed); Gaps counts holes in the sequence numbers seen.
	Lost     uint64
	Gaps     uint64
	DecodeNS float64
	Allocs   int64
}

// MonotonicNow is CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns.
func MonotonicNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

func progressf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}

// RunEvents measures the whole pipeline: BPF program -> ring buffer ->
// reader goroutine -> Decode -> bounded queue -> consumer.
func RunEvents(ctx context.Context, src EventSource, cfg EventsConfig) (EventsResult, error) {
	var res EventsResult
	before, err := benchStats(src)
	if err != nil {
		return res, err
	}

	progressf(cfg.Progress, "latency: %d single events, each sent after the last arrived", cfg.LatencySamples)
	res.Samples = make([]time.Duration, 0, cfg.LatencySamples)
	for i := 0; i < cfg.LatencySamples; i++ {
		if err := src.BenchTrigger(1); err != nil {
			return res, err
		}
		ev, err := next(ctx, src)
		if err != nil {
			return res, fmt.Errorf("latency sample %d: %w", i, err)
		}
		res.Samples = append(res.Samples, time.Duration(MonotonicNow()-ev.Hdr().TimestampNS))
	}
	res.Latency = Summarize(res.Samples)

	progressf(cfg.Progress, "throughput: %d events in batches of %d, at most %d in flight", cfg.ThroughputEvents, cfg.Batch, cfg.Window)
	var lastSeq uint64
	haveSeq := false
	received, sent := 0, 0
	start := time.Now()
	for received < cfg.ThroughputEvents {
		for sent < cfg.ThroughputEvents && sent-received+cfg.Batch <= cfg.Window {
			n := min(cfg.Batch, cfg.ThroughputEvents-sent)
			if err := src.BenchTrigger(n); err != nil {
				return res, err
			}
			sent += n
		}
		ev, err := next(ctx, src)
		if err != nil {
			return res, fmt.Errorf("throughput after %d events: %w", received, err)
		}
		received++
		if b, ok := ev.(*event.Bench); ok {
			if haveSeq && b.Seq != lastSeq+1 {
				res.Gaps++
			}
			lastSeq, haveSeq = b.Seq, true
		}
		// Drain what is queued without going back to the trigger.
	drain:
		for received < cfg.ThroughputEvents {
			select {
			case ev, ok := <-src.Events():
				if !ok {
					return res, errors.New("event queue closed")
				}
				received++
				if b, ok := ev.(*event.Bench); ok {
					if b.Seq != lastSeq+1 {
						res.Gaps++
					}
					lastSeq = b.Seq
				}
			default:
				break drain
			}
		}
	}
	res.Elapsed = time.Since(start)
	res.Events = received
	res.PerSecond = float64(received) / res.Elapsed.Seconds()

	after, err := benchStats(src)
	if err != nil {
		return res, err
	}
	res.Lost = after.Lost() - before.Lost()

	if cfg.SkipDecode {
		return res, nil
	}
	progressf(cfg.Progress, "decode: testing.Benchmark over a reclaim record")
	rec := reclaimRecord()
	br := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := event.Decode(rec); err != nil {
				b.Fatal(err)
			}
		}
	})
	res.DecodeNS = float64(br.T.Nanoseconds()) / float64(max(br.N, 1)) // NsPerOp truncates to whole ns
	res.Allocs = br.AllocsPerOp()
	return res, nil
}

func next(ctx context.Context, src EventSource) (event.Event, error) {
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case ev, ok := <-src.Events():
		if !ok {
			return nil, errors.New("event queue closed")
		}
		return ev, nil
	case <-t.C:
		return nil, errors.New("no event within 5s")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func benchStats(src EventSource) (loader.RingStats, error) {
	st, err := src.Stats()
	if err != nil {
		return loader.RingStats{}, err
	}
	for _, s := range st {
		if s.Ring == loader.RingBench.String() {
			return s, nil
		}
	}
	return loader.RingStats{}, errors.New("bench ring not loaded")
}

// reclaimRecord is a well-formed reclaim record, the hottest kind.
func reclaimRecord() []byte {
	b := make([]byte, 72)
	binary.LittleEndian.PutUint16(b[0:], uint16(event.KindReclaim))
	b[2] = 1
	binary.LittleEndian.PutUint32(b[8:], 4242)
	binary.LittleEndian.PutUint64(b[16:], 123456789)
	binary.LittleEndian.PutUint64(b[24:], 2774)
	binary.LittleEndian.PutUint64(b[32:], 1)
	binary.LittleEndian.PutUint32(b[40:], 1)
	binary.LittleEndian.PutUint64(b[56:], 1500000)
	binary.LittleEndian.PutUint64(b[64:], 32)
	return b
}

// WriteEventsTable prints the result as a table against the targets.
func WriteEventsTable(w io.Writer, r EventsResult) {
	us := func(d time.Duration) string { return fmt.Sprintf("%.1f µs", float64(d)/1e3) }
	fmt.Fprintf(w, "%-34s %-16s %s\n", "measure", "value", "target")
	fmt.Fprintf(w, "%-34s %-16s %s\n", "delivery latency p50", us(r.Latency.P50), "")
	fmt.Fprintf(w, "%-34s %-16s %s\n", "delivery latency p99", us(r.Latency.P99), "<= 1000 µs")
	fmt.Fprintf(w, "%-34s %-16s %s\n", "delivery latency p99.9", us(r.Latency.P999), "")
	fmt.Fprintf(w, "%-34s %-16s %s\n", "delivery latency max", us(r.Latency.Max), "")
	fmt.Fprintf(w, "%-34s %-16s %s\n", "latency samples", fmt.Sprint(r.Latency.N), "")
	fmt.Fprintf(w, "%-34s %-16s %s\n", "sustained throughput", fmt.Sprintf("%.0f ev/s", r.PerSecond), ">= 200000 ev/s")
	fmt.Fprintf(w, "%-34s %-16s %s\n", "events / lost / sequence gaps", fmt.Sprintf("%d / %d / %d", r.Events, r.Lost, r.Gaps), "0 lost")
	fmt.Fprintf(w, "%-34s %-16s %s\n", "decode (reclaim record)", fmt.Sprintf("%.0f ns, %d alloc", r.DecodeNS, r.Allocs), "<= 100 ns")
}
