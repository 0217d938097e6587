package bench

import (
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	var s []time.Duration
	for i := 100; i >= 1; i-- {
		s = append(s, time.Duration(i)*time.Microsecond)
	}
	got := Summarize(s)
	if got.N != 100 || got.Min != time.Microsecond || got.Max != 100*time.Microsecond {
		t.Fatalf("bounds wrong: %+v", got)
	}
	if got.P50 != 50*time.Microsecond || got.P99 != 99*time.Microsecond {
		t.Errorf("p50 %v p99 %v, want 50µs and 99µs", got.P50, got.P99)
	}
	if got.Mean != 50500*time.Nanosecond {
		t.Errorf("mean %v, want 50.5µs", got.Mean)
	}
	if s[0] != 100*time.Microsecond {
		t.Error("Summarize reordered its input")
	}
	// Few samples, as the OOM race has per rate and strategy: p99 is the
	// worst, p50 the median.
	for _, c := range []struct {
		in       []time.Duration
		p50, p99 time.Duration
	}{
		{[]time.Duration{1}, 1, 1},
		{[]time.Duration{3, 1}, 1, 3},
		{[]time.Duration{-1592, 6653, -1382}, -1382, 6653},
		{[]time.Duration{4, 1, 3, 2}, 2, 4},
	} {
		if got := Summarize(c.in); got.P50 != c.p50 || got.P99 != c.p99 {
			t.Errorf("Summarize(%v): p50 %v p99 %v, want %v and %v", c.in, got.P50, got.P99, c.p50, c.p99)
		}
	}
	if (Summarize(nil) != Summary{}) {
		t.Error("an empty sample set must give a zero summary")
	}
}
