package bench

import (
	"math"
	"slices"
	"time"
)

// Summary is a latency distribution.
type Summary struct {
	N             int
	Min, P50, P90 time.Duration
	P99, P999     time.Duration
	Max, Mean     time.Duration
}

// Summarize sorts a copy of samples and reads the quantiles (nearest rank).
func Summarize(samples []time.Duration) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	// Nearest rank: the smallest sample with at least p of them at or
	// below it. With few samples p99 is the maximum (it was the median
	// for 3: a round-then-clamp-then-decrement took one step too many).
	// The epsilon keeps 0.99*100 from ceiling to 100.
	q := func(p float64) time.Duration {
		rank := int(math.Ceil(p*float64(len(s)) - 1e-9))
		return s[min(max(rank, 1), len(s))-1]
	}
	var sum time.Duration
	for _, v := range s {
		sum += v
	}
	return Summary{
		N: len(s), Min: s[0], P50: q(0.50), P90: q(0.90), P99: q(0.99), P999: q(0.999),
		Max: s[len(s)-1], Mean: sum / time.Duration(len(s)),
	}
}
