package eviction

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

const (
	Ki = int64(1) << 10
	Mi = int64(1) << 20
	Gi = int64(1) << 30
)

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// pod returns a burstable pod named name (its UID too) using usage bytes
// of memory with the given request.
func pod(name string, usage, request int64) Pod {
	return Pod{
		UID: types.UID(name), Namespace: "ns", Name: name, QOS: corev1.PodQOSBurstable,
		MemoryUsage: usage, MemoryRequest: request, GracePeriod: 30 * time.Second,
		CgroupID: uint64(len(name)) + 100,
	}
}

func mustThresholds(t *testing.T, c ThresholdConfig) []Threshold {
	t.Helper()
	ts, err := ParseThresholds(c)
	if err != nil {
		t.Fatalf("ParseThresholds: %v", err)
	}
	return ts
}

func mustRule(t *testing.T, s string) PSIRule {
	t.Helper()
	r, err := ParsePSIRule(s)
	if err != nil {
		t.Fatalf("ParsePSIRule(%q): %v", s, err)
	}
	return r
}

func mustPolicy(t *testing.T, c PolicyConfig) *Policy {
	t.Helper()
	p, err := NewPolicy(c)
	if err != nil {
		t.Fatalf("NewPolicy: %v", err)
	}
	return p
}

// memObs observes memory.available at avail bytes of 8 GiB.
func memObs(avail int64, pods ...Pod) Observations {
	return Observations{
		Signals: map[nodestats.Signal]nodestats.Observation{
			nodestats.SignalMemoryAvailable: {Signal: nodestats.SignalMemoryAvailable, Available: avail, Capacity: 8 * Gi},
		},
		Pods: pods,
	}
}

// victims renders decisions as "hard a", "soft b", "dry hard c".
func victims(ds []Decision) []string {
	var out []string
	for _, d := range ds {
		s := "soft "
		if d.Hard {
			s = "hard "
		}
		if d.DryRun {
			s = "dry " + s
		}
		out = append(out, s+d.Victim.Name)
	}
	return out
}
