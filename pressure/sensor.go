package pressure

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nodeguard/nodeguard/cgroups/cgstat"
)

// Sensor runs a Snapshotter: one snapshot per tick, except while Fresh
// is called at least every tick and a half (the eviction manager's own
// safety tick is then enough), one more whenever Wake is signalled (a PSI
// trigger, a kernel event), and keeps the newest.
type Sensor struct {
	snap   *Snapshotter
	tick   time.Duration
	now    func() time.Time
	latest atomic.Pointer[Snapshot]
	// freshAt: when Fresh was last called from outside Run, on the
	// monotonic clock (now may be a test's clock).
	freshAt atomic.Pointer[time.Time]
	full    atomic.Pointer[FullStats]
	// fullMu serialises readings of full statistics (Full); stater and
	// fullEvery are set once by EnableFull.
	fullMu sync.Mutex
	// coldMu lets one scrape at a time take a snapshot for it (Scrape).
	coldMu    sync.Mutex
	stater    *cgstat.Stater
	fullEvery time.Duration
	wake      chan struct{}
	// runCtx is Run's context, under which a scrape's snapshot is taken
	// (Scrape): it ends with the Sensor, not with one scrape.
	runCtx atomic.Pointer[context.Context]
	// snapMu serialises snapshots: the tick's and Fresh's share the
	// Snapshotter's open files. runDone, under it, is set once Run has
	// returned: a scrape then takes no snapshot (the Snapshotter may be
	// closing).
	snapMu  sync.Mutex
	runDone bool
	// published holds the newest snapshot OnSnapshot has not seen yet.
	published chan *Snapshot
	// OnSnapshot, when set, sees the snapshots while Run runs, in order,
	// on Run's own goroutine: never on the caller of Fresh, which may be
	// deciding an eviction. An observer slower than the snapshots sees
	// the newest one only.
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
	return &Sensor{snap: s, tick: tick, now: now, wake: make(chan struct{}, 1), published: make(chan *Snapshot, 1)}
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

// Run takes snapshots, and hands them to OnSnapshot, until ctx is done.
func (s *Sensor) Run(ctx context.Context) {
	s.runCtx.Store(&ctx)
	defer func() {
		s.snapMu.Lock()
		s.runDone = true
		s.snapMu.Unlock()
	}()
	done := make(chan struct{})
	defer func() { <-done }()
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case snap := <-s.published:
				if s.OnSnapshot != nil {
					s.OnSnapshot(snap)
				}
			}
		}
	}()
	t := time.NewTimer(s.tick)
	defer t.Stop()
	s.take(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// Someone else's snapshots (Fresh) stand for the tick's
			// while they keep coming: two readers of the same cgroups
			// each second would double the agent's idle cost. A tick
			// and a half, not one: at equal periods the two would race.
			if at := s.freshAt.Load(); at != nil {
				if age, yield := time.Since(*at), s.tick+s.tick/2; age < yield {
					t.Reset(yield - age)
					continue
				}
			}
		case <-s.wake:
		}
		s.take(ctx)
		t.Reset(s.tick)
	}
}

// Fresh takes a snapshot now, makes it the newest and returns it: what
// the eviction manager confirms every wake-up on. It waits for a snapshot
// in progress to finish first, never for OnSnapshot: re-arming the v1
// tripwire there costs two RCU grace periods (5-6 ms here), which the
// eviction decision used to wait for.
func (s *Sensor) Fresh(ctx context.Context) *Snapshot {
	snap := s.take(ctx)
	at := time.Now()
	s.freshAt.Store(&at)
	return snap
}

// FreshCalm is Fresh with a calm snapshot (Snapshotter.SnapshotCalm): the
// eviction manager's tick while memory is far from every threshold.
func (s *Sensor) FreshCalm(ctx context.Context) *Snapshot {
	snap := s.takeCalm(ctx, true)
	at := time.Now()
	s.freshAt.Store(&at)
	return snap
}

func (s *Sensor) take(ctx context.Context) *Snapshot { return s.takeCalm(ctx, false) }

func (s *Sensor) takeCalm(ctx context.Context, calm bool) *Snapshot {
	if calm {
		return s.takeWith(ctx, s.snap.SnapshotCalm)
	}
	return s.takeWith(ctx, s.snap.Snapshot)
}

func (s *Sensor) takeWith(ctx context.Context, read func(context.Context, time.Time) *Snapshot) *Snapshot {
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	return s.takeLocked(ctx, read)
}

// takeLocked takes a snapshot with read and publishes it; under snapMu.
func (s *Sensor) takeLocked(ctx context.Context, read func(context.Context, time.Time) *Snapshot) *Snapshot {
	snap := read(ctx, s.now())
	s.latest.Store(snap)
	s.publish(snap) // under snapMu: published in the order taken
	return snap
}

// Scrape is the snapshot a metrics scrape reports: the newest one when
// the cold cgroups' readings in it (Snapshot.ColdAt) are younger than the
// full statistics' interval (EnableFull; DefaultFullEvery), or else a new
// one that reads them (Snapshotter.SnapshotCold), taken under Run's
// context. The cold cgroups, the containers' beneath the pods, feed only
// metrics, so they are read when metrics are asked for and not on ticks
// of their own; scrapes that come together share one reading. Nil before
// the first snapshot, and the newest as it is before Run starts.
func (s *Sensor) Scrape() *Snapshot {
	snap := s.Latest()
	ctx := s.runCtx.Load()
	if snap == nil || ctx == nil || (*ctx).Err() != nil {
		return snap
	}
	every := s.fullEvery
	if every <= 0 {
		every = DefaultFullEvery
	}
	if !snap.ColdAt.IsZero() && s.now().Sub(snap.ColdAt) < every {
		return snap
	}
	s.coldMu.Lock()
	defer s.coldMu.Unlock()
	if snap := s.Latest(); !snap.ColdAt.IsZero() && s.now().Sub(snap.ColdAt) < every {
		return snap // read by the scrape this one waited for
	}
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	if s.runDone || (*ctx).Err() != nil {
		return s.Latest() // stopping: the Snapshotter may be closed
	}
	return s.takeLocked(*ctx, s.snap.SnapshotCold)
}

// publish hands snap to Run's observer goroutine, replacing a snapshot it
// has not taken yet; it never blocks.
func (s *Sensor) publish(snap *Snapshot) {
	for {
		select {
		case s.published <- snap:
			return
		default:
		}
		select {
		case <-s.published:
		default:
		}
	}
}

// FullStats are the full statistics of every cgroup of one snapshot (cpu
// time and throttling, block I/O, pids, through containerd/cgroups), read
// when metrics ask for them (Full).
type FullStats struct {
	Time  time.Time
	Took  time.Duration
	ByKey map[CgroupKey]*cgstat.Full
	// Errors counts cgroups whose statistics could not be read (other
	// than vanishing).
	Errors int
}

// DefaultFullEvery is how long Full reuses the full statistics it read:
// shorter than the usual scrape intervals (10 s and more), so that each
// scrape of one Prometheus reads fresh ones, while scrapes that come
// together (two Prometheus servers, a dashboard's refresh) share one.
const DefaultFullEvery = 5 * time.Second

// EnableFull lets Full read full statistics with st, reusing a reading for
// every (DefaultFullEvery when 0). Call it before Full is.
func (s *Sensor) EnableFull(st *cgstat.Stater, every time.Duration) {
	if every <= 0 {
		every = DefaultFullEvery
	}
	s.stater, s.fullEvery = st, every
}

// Full returns the full statistics of the newest snapshot's cgroups: the
// last ones read if they are younger than EnableFull's interval, or else
// read now. One reading runs at a time and callers that ask meanwhile
// share it. Nothing is read while nobody asks: the full statistics feed
// only metrics, and a pass over 330 cgroups costs ~50 ms of CPU on v1,
// which a tick of its own spent every 15 s whether or not anything
// scraped. Nil before the first snapshot or without EnableFull.
func (s *Sensor) Full() *FullStats {
	if s.stater == nil {
		return nil
	}
	fresh := func() *FullStats {
		if fs := s.full.Load(); fs != nil && s.now().Sub(fs.Time) < s.fullEvery {
			return fs
		}
		return nil
	}
	if fs := fresh(); fs != nil {
		return fs
	}
	s.fullMu.Lock()
	defer s.fullMu.Unlock()
	if fs := fresh(); fs != nil {
		return fs // read by the caller this one waited for
	}
	snap := s.Latest()
	if snap == nil {
		return nil
	}
	fs := s.readFull(snap, s.stater)
	s.full.Store(fs)
	return fs
}

func (s *Sensor) readFull(snap *Snapshot, st *cgstat.Stater) *FullStats {
	start := time.Now()
	fs := &FullStats{Time: s.now(), ByKey: make(map[CgroupKey]*cgstat.Full, len(snap.Cgroups))}
	for i := range snap.Cgroups {
		c := &snap.Cgroups[i]
		dirs, err := s.snap.AllDirs(c.Rel)
		if err != nil {
			continue
		}
		f, err := st.Full(dirs...)
		if err != nil {
			if !errors.Is(err, cgstat.ErrGone) {
				fs.Errors++
			}
			continue
		}
		fs.ByKey[c.Key] = f
	}
	fs.Took = time.Since(start)
	return fs
}
