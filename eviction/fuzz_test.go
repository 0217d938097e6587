package eviction

import (
	"errors"
	"testing"
)

// FuzzParseThresholdList checks that the flag form never panics, that
// its errors are classified, and that whatever it accepts is accepted by
// ParseThresholds as hard thresholds. Seeds are in
// testdata/fuzz/FuzzParseThresholdList.
func FuzzParseThresholdList(f *testing.F) {
	f.Add("memory.available<100Mi,nodefs.available<10%")
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseThresholdList(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrUnsupportedSignal) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		ts, err := ParseThresholds(ThresholdConfig{EvictionHard: m})
		if err != nil {
			t.Fatalf("ParseThresholdList accepted %q but ParseThresholds refuses it: %v", s, err)
		}
		for _, th := range ts {
			if th.Value.Quantity <= 0 && (th.Value.Percentage <= 0 || th.Value.Percentage >= 1) {
				t.Fatalf("%q: threshold %s out of range", s, th)
			}
			if _, err := NewPolicy(PolicyConfig{Thresholds: ts}); err != nil {
				t.Fatalf("%q: NewPolicy: %v", s, err)
			}
		}
	})
}

// FuzzParsePSIRule checks that a rule never panics, that errors match
// ErrInvalid, and that an accepted rule's canonical form parses back to
// the same rule. Seeds are in testdata/fuzz/FuzzParsePSIRule.
func FuzzParsePSIRule(f *testing.F) {
	f.Add("memory.full.avg10>40 for 10s")
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParsePSIRule(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		again, err := ParsePSIRule(r.String())
		if err != nil || again != r {
			t.Fatalf("%q: canonical %q parses to %+v, %v; want %+v", s, r, again, err, r)
		}
		if r.Percent < 0 || r.Percent >= 100 || r.For < 0 {
			t.Fatalf("%q: out of range %+v", s, r)
		}
	})
}
