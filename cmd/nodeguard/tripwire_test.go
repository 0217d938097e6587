package main

import (
	"errors"
	"log/slog"
	"slices"
	"testing"

	"github.com/nodeguard/nodeguard/oom"
	"github.com/nodeguard/nodeguard/oom/tripwire"
	"github.com/nodeguard/nodeguard/pressure"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// armRecorder is a tripwire.Tripwire that records Arm, failing while err
// is set.
type armRecorder struct {
	tripwire.Tripwire // nil: only Arm is called
	arms              []uint64
	err               error
}

func (a *armRecorder) Arm(th uint64) error {
	a.arms = append(a.arms, th)
	return a.err
}

// The placement is oom.TripwirePolicy's (tested there); the wiring arms
// where it says, and tries a failed Arm again at the next snapshot
// instead of taking the wire for armed.
func TestPodRootTripwireArmsWhereThePolicySaysAndRetriesAFailedArm(t *testing.T) {
	const capacity = 1 << 30
	th := []oom.Threshold{{Signal: nodestats.SignalAllocatableMemoryAvailable, Value: oom.ThresholdValue{Quantity: 100 << 20}}}
	s := &pressure.Snapshot{Signals: []nodestats.Observation{{Signal: nodestats.SignalAllocatableMemoryAvailable, Available: capacity / 2, Capacity: capacity}}}
	const line = capacity - 100<<20
	rec := &armRecorder{err: errors.New("cgroup.event_control: no such file")}
	p := &podRootTripwire{tw: rec, log: slog.New(slog.DiscardHandler), policy: oom.NewTripwirePolicy(th, false)}
	p.rearm(s)
	rec.err = nil
	p.rearm(s)
	p.rearm(s) // armed now: stays
	if want := []uint64{line, line}; !slices.Equal(rec.arms, want) {
		t.Errorf("armed at %v, want %v (the failed one tried again, then left alone)", rec.arms, want)
	}
}
