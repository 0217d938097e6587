package main

import (
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

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

// TestTheTripwireIsDownWhileArmingFails: the watchdog vouches for an armed
// tripwire; a wire that cannot be armed stops the pings until it is where
// it should be again: armed anew, or back near the line armed before the
// failure (too small a move to arm again, so the old line stands).
func TestTheTripwireIsDownWhileArmingFails(t *testing.T) {
	const capacity = 1 << 30
	const line = capacity - 100<<20
	th := []oom.Threshold{{Signal: nodestats.SignalAllocatableMemoryAvailable, Value: oom.ThresholdValue{Quantity: 100 << 20}}}
	snap := func(usage uint64) *pressure.Snapshot {
		s := &pressure.Snapshot{Signals: []nodestats.Observation{{Signal: nodestats.SignalAllocatableMemoryAvailable, Available: capacity / 2, Capacity: capacity}}}
		s.Node.Pods.Usage = usage
		return s
	}
	tw := &armRecorder{}
	p := &podRootTripwire{tw: tw, log: slog.New(slog.DiscardHandler), policy: oom.NewTripwirePolicy(th, true)}
	hb := p.heartbeat()
	down := func() string {
		why, _ := hb.stuck(time.Now(), time.Now(), time.Second)
		return why
	}
	if why := down(); why != "" {
		t.Fatalf("down before any snapshot: %s", why)
	}
	p.rearm(snap(line + 64<<20)) // armed 1 MiB above usage
	if why := down(); why != "" {
		t.Fatalf("down once armed: %s", why)
	}
	tw.err = errors.New("write memory.high: device or resource busy")
	p.rearm(snap(line + 80<<20))
	if why := down(); !strings.HasPrefix(why, "tripwire down: arming the tripwire failed") {
		t.Fatalf("after a failed arm: %q", why)
	}
	tw.err = nil
	// Back within 1 MiB of the line armed before the failure.
	p.rearm(snap(line + 64<<20 + 512<<10))
	if why := down(); why != "" {
		t.Errorf("still down with the wire near its line (arms %v): %s", tw.arms, why)
	}
	tw.err = errors.New("write memory.high: device or resource busy")
	p.rearm(snap(line + 80<<20))
	tw.err = nil
	p.rearm(snap(line + 80<<20))
	if why := down(); why != "" {
		t.Errorf("still down after an arm that succeeded (arms %v): %s", tw.arms, why)
	}
}
