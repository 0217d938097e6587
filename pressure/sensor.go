package pressure

import (
	"context"
	"sync/atomic"
	"time"
)

// Sensor runs a Snapshotter: one snapshot per tick and one more whenever
// Wake is signalled (a PSI trigger, a kernel event), and keeps the newest.
type Sensor struct {
	snap   *Snapshotter
	tick   time.Duration
	now    func() time.Time
	latest atomic.Pointer[Snapshot]
	wake   chan struct{}
	// OnSnapshot, when set, sees every snapshot (metrics); it must not
	// block.
	OnSnapshot func(*Snapshot)
}

// NewSensor takes snapshots every tick (the safety tick: default 1 s).
func NewSensor(s *Snapshotter, tick time.Duration, now func() time.Time) *Sensor {
	if tick <= 0 {
		tick = time.Second
	}
	if now == nil {
		now = time.Now
	}
	return &Sensor{snap: s, tick: tick, now: now, wake: make(chan struct{}, 1)}
}

// Latest is the newest snapshot, nil before the first.
func (s *Sensor) Latest() *Snapshot { return s.latest.Load() }

// Wake asks for a snapshot now; wake-ups that arrive while one is pending
// coalesce.
func (s *Sensor) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Add and Remove forward cgroup births and deaths to the Snapshotter.
func (s *Sensor) Add(rel string)    { s.snap.Add(rel) }
func (s *Sensor) Remove(rel string) { s.snap.Remove(rel) }

// Run takes snapshots until ctx is done.
func (s *Sensor) Run(ctx context.Context) {
	t := time.NewTicker(s.tick)
	defer t.Stop()
	s.once(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.wake:
		}
		s.once(ctx)
	}
}

func (s *Sensor) once(ctx context.Context) {
	snap := s.snap.Snapshot(ctx, s.now())
	s.latest.Store(snap)
	if s.OnSnapshot != nil {
		s.OnSnapshot(snap)
	}
}
