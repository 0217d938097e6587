package agent

import (
	"errors"
	"time"
)

// What the watchdog vouches for (see runWatchdog): the parts that make the
// agent useful. A part that is legitimately absent (no eBPF, no tripwire)
// has no heartbeat.

// heartbeats are sensing's: the snapshot loop with its observer, and the
// kernel event consumer when there is a pipeline.
func (s *sensing) heartbeats() []heartbeat {
	beats := []heartbeat{{name: "sensing", period: s.flags.tick, last: s.lastObserved}}
	if s.pipeline != nil {
		// Events come when they come: waiting for one is progress,
		// handling one for long is not.
		beats = append(beats, heartbeat{name: "kernel events", period: s.flags.tick,
			last: func() time.Time {
				if ns := s.readerBusySince.Load(); ns != 0 {
					return time.Unix(0, ns)
				}
				return time.Now()
			},
			down: func() error {
				if s.readerDone.Load() {
					return errors.New("the kernel event consumer has returned")
				}
				return nil
			}})
	}
	return beats
}

// lastObserved is when the snapshot the sensing loop's observer last took
// was taken (zero: none yet).
func (s *sensing) lastObserved() time.Time {
	if ns := s.observed.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// heartbeat is the tripwire's: down while arming it fails (it is re-armed
// from every snapshot, which the sensing heartbeat vouches for). Before
// the first snapshot, or without a memory threshold to arm at, nothing is
// armed, and that is no failure.
func (p *podRootTripwire) heartbeat() heartbeat {
	return heartbeat{name: "tripwire", down: func() error {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.failed {
			return errors.New("arming the tripwire failed on the last snapshot")
		}
		return nil
	}}
}
