package bench

import (
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
	q := func(p float64) time.Duration {
		i := int(p*float64(len(s)) + 0.5)
		if i >= len(s) {
			i = len(s) - 1
		}
		if i > 0 {
			i--
		}
		return s[i]
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
