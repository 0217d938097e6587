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
	if (Summarize(nil) != Summary{}) {
		t.Error("an empty sample set must give a zero summary")
	}
}
