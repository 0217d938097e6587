package eviction

import (
	"slices"

	"github.com/nodeguard/nodeguard/pressure"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// tripwireMinMove is the smallest move of an armed tripwire worth making:
// re-arming a v1 usage threshold takes two RCU grace periods (5-6 ms),
// and the line moves with every snapshot by the noise of the node's
// working set.
const tripwireMinMove = 1 << 20

// TripwirePolicy decides where the tripwire on the pod cgroup root
// (package pressure/tripwire, which only senses) is armed: at the pod root
// usage where the nearest memory threshold would be crossed, recomputed
// from every snapshot. The wire fires early, never late; the manager
// confirms every fire on a fresh snapshot.
//
// A TripwirePolicy is not safe for concurrent use: its caller holds the
// tripwire's lock around Next, Armed and SetThresholds.
type TripwirePolicy struct {
	// chase: see NewTripwirePolicy.
	chase bool
	th    []Threshold
	armed uint64 // 0: not armed
}

// NewTripwirePolicy returns the policy of a tripwire for thresholds th.
//
// chase keeps the line above usage once usage is past it: on cgroup v2
// with the memory.high mechanism, where a memory.high below usage would
// make the writer reclaim synchronously, and on v1 (a usage threshold
// armed below usage fires only after usage went down and up again). Not
// for the v2 working-set poll, whose line stays where the threshold is:
// it fires when the pods' working set, not their usage, reaches it.
func NewTripwirePolicy(th []Threshold, chase bool) *TripwirePolicy {
	return &TripwirePolicy{th: slices.Clone(th), chase: chase}
}

// SetThresholds re-aims the policy at new thresholds: the next snapshot
// arms the wire afresh, wherever it was.
func (p *TripwirePolicy) SetThresholds(th []Threshold) {
	p.th = slices.Clone(th)
	p.armed = 0
}

// Line is the pod root usage at which the nearest memory threshold is
// crossed, from the snapshot's signals: allocatableMemory.available<T at
// allocatable-T; memory.available<T where the node's working set reaches
// capacity-T, i.e. the pods' share of it. Usage counts page cache the
// working set does not, so a usage line is reached early, never late.
// ok is false when no memory threshold is observed in s.
func (p *TripwirePolicy) Line(s *pressure.Snapshot) (line uint64, ok bool) {
	best := uint64(0)
	for _, t := range p.th {
		obs, ok := s.Signal(t.Signal)
		if !ok {
			continue
		}
		thr := t.Value.Amount(obs.Capacity)
		var at int64
		switch t.Signal {
		case nodestats.SignalAllocatableMemoryAvailable:
			at = obs.Capacity - thr
		case nodestats.SignalMemoryAvailable:
			// pods usage + (node working set - pods working set) = capacity - thr
			nonPods := (obs.Capacity - obs.Available) - int64(s.Node.Pods.WorkingSet())
			at = obs.Capacity - thr - nonPods
		default:
			continue
		}
		if at > 0 && (best == 0 || uint64(at) < best) {
			best = uint64(at)
		}
	}
	return best, best > 0
}

// Next returns where to arm the wire after snapshot s, and false when it
// stays where it is: no memory threshold observed, or a move of less than
// 1 MiB from where it was last Armed.
func (p *TripwirePolicy) Next(s *pressure.Snapshot) (uint64, bool) {
	at, ok := p.Line(s)
	if !ok {
		return 0, false
	}
	if usage := s.Node.Pods.Usage; p.chase && at <= usage {
		// Usage is past the line. A v1 threshold armed below usage
		// fires only after usage has gone down and up again, and a
		// memory.high below usage would make the writer reclaim
		// synchronously: the wire must go above usage. Where the
		// working set is still below the line, usage is over it by page
		// cache: arm where the working set reaches the line if the
		// cache stays (the line plus usage - working set, the
		// allowance the kubelet's memcg notifier makes for
		// inactive_file). Not "just above usage": the wire would then
		// fire every MiB, and re-arming a v1 threshold takes two RCU
		// grace periods (5-6 ms), in which a ramp of 200 MiB/s or more
		// passes the new level before it is armed, and nothing fires
		// until the safety tick. Already over by the working set too,
		// the manager is evaluating anyway: just above usage. (The
		// working-set poll stays at the line.)
		if ws := s.Node.Pods.WorkingSet(); ws < at {
			at += usage - ws
		} else {
			at = usage + 1<<20
		}
	}
	if d := int64(at) - int64(p.armed); p.armed != 0 && d > -tripwireMinMove && d < tripwireMinMove {
		return 0, false
	}
	return at, true
}

// Armed records that the wire was armed at level (Next's answer). A wire
// that failed to arm is not recorded: the next snapshot tries again.
func (p *TripwirePolicy) Armed(level uint64) { p.armed = level }
