package agent

import (
	"strings"
	"testing"
	"time"
)

// A negative interval is refused by name before anything is opened.
func TestSensingRefusesNegativeIntervals(t *testing.T) {
	for _, f := range []*senseFlags{{tick: -time.Second}, {fullEvery: -time.Second}} {
		s, err := startSensing(t.Context(), f, nil)
		if err == nil {
			s.Close()
			t.Fatalf("startSensing(%+v) accepted a negative interval", f)
		}
		if !strings.Contains(err.Error(), "must not be negative") || !strings.Contains(err.Error(), "--") {
			t.Errorf("startSensing: %v, want the flag named and why", err)
		}
	}
}
