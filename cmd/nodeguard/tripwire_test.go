package main

import (
	"log/slog"
	"slices"
	"testing"

	"github.com/nodeguard/nodeguard/oom"
	"github.com/nodeguard/nodeguard/oom/tripwire"
	"github.com/nodeguard/nodeguard/pressure"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// armRecorder is a tripwire.Tripwire that records Arm.
type armRecorder struct {
	tripwire.Tripwire // nil: only Arm is called
	arms              []uint64
}

func (a *armRecorder) Arm(th uint64) error { a.arms = append(a.arms, th); return nil }

func TestPodRootTripwireRearm(t *testing.T) {
	const capacity = 1 << 30
	th := []oom.Threshold{{Signal: nodestats.SignalAllocatableMemoryAvailable, Value: oom.ThresholdValue{Quantity: 100 << 20}}}
	// usages are {usage, inactive_file} of the pod root.
	snap := func(u [2]uint64) *pressure.Snapshot {
		s := &pressure.Snapshot{Signals: []nodestats.Observation{{Signal: nodestats.SignalAllocatableMemoryAvailable, Available: capacity / 2, Capacity: capacity}}}
		s.Node.Pods.Usage, s.Node.Pods.InactiveFile = u[0], u[1]
		return s
	}
	const line = capacity - 100<<20
	tests := []struct {
		name   string
		chase  bool
		usages [][2]uint64
		want   []uint64
	}{
		{"below the line the wire sits at the line", false, [][2]uint64{{256 << 20, 0}}, []uint64{line}},
		{"page cache above the line does not move the working-set wire", false,
			[][2]uint64{{256 << 20, 0}, {line + 64<<20, 96 << 20}, {line + 96<<20, 128 << 20}}, []uint64{line}},
		{"page cache below the line: the v1 or memory.high wire sits at the line", true, [][2]uint64{{line - 8<<20, 64 << 20}}, []uint64{line}},
		// usage past the line by cache, the working set 32 MiB below
		// it: armed where the working set reaches the line, as long as
		// the cache stays (96 MiB above usage), not 1 MiB above usage.
		{"usage past the line by page cache: the wire is where the working set reaches the line", true,
			[][2]uint64{{line + 64<<20, 96 << 20}}, []uint64{line + 96<<20}},
		{"the working set growing under the same cache does not move it", true,
			[][2]uint64{{line + 64<<20, 96 << 20}, {line + 80<<20, 96 << 20}, {line + 95<<20, 96 << 20}}, []uint64{line + 96<<20}},
		{"cache reclaimed: the wire comes down with it", true,
			[][2]uint64{{line + 64<<20, 96 << 20}, {line + 16<<20, 32 << 20}}, []uint64{line + 96<<20, line + 32<<20}},
		{"the working set past the line too: the wire is kept just above usage", true,
			[][2]uint64{{line + 64<<20, 32 << 20}}, []uint64{line + 65<<20}},
		{"moves under 1 MiB are skipped", true,
			[][2]uint64{{line + 64<<20, 0}, {line + 64<<20 + 512<<10, 0}}, []uint64{line + 65<<20}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &armRecorder{}
			p := &podRootTripwire{tw: rec, th: th, log: slog.New(slog.DiscardHandler), chase: tt.chase}
			for _, u := range tt.usages {
				p.rearm(snap(u))
			}
			if !slices.Equal(rec.arms, tt.want) {
				t.Errorf("armed at %v, want %v", rec.arms, tt.want)
			}
		})
	}
}
