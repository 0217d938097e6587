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
	snap := func(usage uint64) *pressure.Snapshot {
		s := &pressure.Snapshot{Signals: []nodestats.Observation{{Signal: nodestats.SignalAllocatableMemoryAvailable, Available: capacity / 2, Capacity: capacity}}}
		s.Node.Pods.Usage = usage
		return s
	}
	const line = capacity - 100<<20
	tests := []struct {
		name   string
		chase  bool
		usages []uint64
		want   []uint64
	}{
		{"below the line the wire sits at the line", false, []uint64{256 << 20}, []uint64{line}},
		{"page cache above the line does not move the working-set wire", false, []uint64{256 << 20, line + 64<<20, line + 96<<20}, []uint64{line}},
		{"a memory.high or v1 wire is kept just above usage", true, []uint64{line + 64<<20}, []uint64{line + 65<<20}},
		{"moves under 1 MiB are skipped", true, []uint64{line + 64<<20, line + 64<<20 + 512<<10}, []uint64{line + 65<<20}},
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
