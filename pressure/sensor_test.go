package pressure_test

import (
	"context"
	"path"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/cgstat"
	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/pressure"
)

// Fresh never waits for OnSnapshot (the eviction manager calls it to
// decide), and OnSnapshot still sees the snapshots in the order taken,
// the newest last, on Run's goroutine.
func TestFreshDoesNotWaitForItsObserver(t *testing.T) {
	snapper := sandboxSnapshotter(t)
	sensor := pressure.NewSensor(snapper, time.Hour, nil)
	const observerTakes = 200 * time.Millisecond
	seen := make(chan *pressure.Snapshot, 64)
	sensor.OnSnapshot = func(s *pressure.Snapshot) {
		time.Sleep(observerTakes) // a slow observer
		seen <- s
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { sensor.Run(ctx); close(ran) }()

	var last *pressure.Snapshot
	start := time.Now()
	const n = 5
	for range n {
		last = sensor.Fresh(ctx)
	}
	took := time.Since(start)
	t.Logf("%d Fresh calls with a %v observer took %v", n, observerTakes, took)
	if took >= n*observerTakes {
		t.Errorf("%d Fresh calls took %v: they waited for the observer (%v each)", n, took, observerTakes)
	}
	var got []*pressure.Snapshot
	for deadline := time.After(10 * time.Second); ; {
		select {
		case s := <-seen:
			got = append(got, s)
		case <-deadline:
			t.Fatalf("the observer never saw the newest snapshot; saw %d", len(got))
		}
		if s := got[len(got)-1]; s == last || s.Time.After(last.Time) { // Run's own may come after
			break
		}
	}
	for i := 1; i < len(got); i++ {
		if got[i].Time.Before(got[i-1].Time) {
			t.Errorf("the observer saw snapshot %d (%v) after a newer one (%v)", i, got[i].Time, got[i-1].Time)
		}
	}
	t.Logf("the observer saw %d of the snapshots taken, the newest last", len(got))
	cancel()
	<-ran
}

// Run ticks on its own until Fresh is called; while the eviction manager
// calls Fresh more often than every tick and a half, Run takes no snapshot
// of its own (before, both read every cgroup each second); once Fresh
// stops, Run's tick takes over again.
func TestTheTickYieldsToFresh(t *testing.T) {
	snapper := sandboxSnapshotter(t)
	var taken atomic.Int64 // every snapshot asks the clock once
	const tick = 500 * time.Millisecond
	sensor := pressure.NewSensor(snapper, tick, func() time.Time { taken.Add(1); return time.Now() })
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { sensor.Run(ctx); close(ran) }()
	defer func() { cancel(); <-ran }()
	for sensor.Latest() == nil { // Run's first snapshot
		time.Sleep(time.Millisecond)
	}
	time.Sleep(3*tick + tick/2)
	if n := taken.Load(); n < 3 { // 4 due; one may be late
		t.Errorf("without Fresh, Run took %d snapshots in 3.5 ticks", n)
	}
	ticked := taken.Load()

	fresh := 0
	for end := time.Now().Add(4 * tick); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		sensor.Fresh(ctx)
		fresh++
	}
	own := taken.Load() - int64(fresh) - ticked
	t.Logf("%d Fresh calls over %v with a %v tick; Run took %d of its own", fresh, 4*tick, tick, own)
	// Without the yield Run takes 4 here; 1 allows a Fresh call late by
	// more than a tick on a loaded machine.
	if own > 1 {
		t.Errorf("Run took %d snapshots of its own while Fresh ran every 20 ms", own)
	}

	before := taken.Load()
	for deadline := time.Now().Add(10 * tick); taken.Load() == before; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Run took no snapshot within %v of the last Fresh", 10*tick)
		}
	}
}

// sandboxSnapshotter snapshots an empty cgroup sandbox of the test's own
// (privileged); it is closed at cleanup.
func sandboxSnapshotter(t *testing.T) *pressure.Snapshotter {
	t.Helper()
	cgtest.RequirePrivileged(t)
	parent := cgtest.New(t)
	snapper, err := pressure.New(pressure.Config{Layout: parent.Layout(), Roots: []string{parent.Rel()}, PodsRoot: parent.Rel(), Allocatable: 1 << 30, NodeFSPath: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { snapper.Close() })
	return snapper
}

// Full reads nothing until asked, then reads the full statistics of the
// newest snapshot's cgroups (real ones: the sandbox root), hands the same
// reading to whoever asks within the interval, including callers that
// ask together, and reads again once it has aged.
func TestFullIsReadWhenAskedAndReusedWithinItsInterval(t *testing.T) {
	snapper := sandboxSnapshotter(t)
	var clock atomic.Int64 // seconds past base
	base := time.Now()
	now := func() time.Time { return base.Add(time.Duration(clock.Load()) * time.Second) }
	sensor := pressure.NewSensor(snapper, time.Hour, now)
	if fs := sensor.Full(); fs != nil {
		t.Fatalf("Full without EnableFull = %+v, want nil", fs)
	}
	layout, err := cgroups.Discover()
	if err != nil {
		t.Fatal(err)
	}
	sensor.EnableFull(cgstat.NewStater(layout), 10*time.Second)
	if fs := sensor.Full(); fs != nil {
		t.Fatalf("Full before the first snapshot = %+v, want nil", fs)
	}
	sensor.Fresh(context.Background())

	first := sensor.Full()
	if first == nil || len(first.ByKey) == 0 || first.Errors != 0 {
		t.Fatalf("first Full = %+v, want the sandbox root's statistics", first)
	}
	together := func() []*pressure.FullStats {
		var wg sync.WaitGroup
		got := make([]*pressure.FullStats, 8)
		for i := range got {
			wg.Go(func() { got[i] = sensor.Full() })
		}
		wg.Wait()
		return got
	}
	clock.Store(9)
	for i, fs := range together() {
		if fs != first {
			t.Errorf("caller %d within the interval got a new reading (at %v), want the first (at %v)", i, fs.Time, first.Time)
		}
	}
	clock.Store(10)
	got := together()
	if got[0] == first || !got[0].Time.Equal(now()) {
		t.Errorf("Full after the interval returned the reading of %v, want a new one at %v", got[0].Time, now())
	}
	for i, fs := range got {
		if fs != got[0] {
			t.Errorf("callers asking together after the interval got readings of their own (%d)", i)
		}
	}
}

// Scrape hands a scrape the newest snapshot while its cold cgroups'
// readings are younger than the interval, and otherwise takes one that
// reads them (once for the callers that ask together), which becomes the
// newest; before Run it takes none.
func TestScrapeReadsTheColdCgroupsWhenTheyAreOld(t *testing.T) {
	cgtest.RequirePrivileged(t)
	parent := cgtest.New(t)
	cold := parent.Child(t, "cold")
	snapper, err := pressure.New(pressure.Config{Layout: parent.Layout(), Roots: []string{parent.Rel()},
		Hot: func(fromRoot string) bool { return path.Base(fromRoot) != "cold" }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { snapper.Close() })
	var clock atomic.Int64 // seconds past base
	base := time.Now()
	now := func() time.Time { return base.Add(time.Duration(clock.Load()) * time.Second) }
	sensor := pressure.NewSensor(snapper, time.Hour, now)
	if snap := sensor.Scrape(); snap != nil {
		t.Fatalf("Scrape before any snapshot = %v, want nil", snap.Time)
	}
	sensor.Fresh(t.Context())
	if snap := sensor.Scrape(); snap != sensor.Latest() || !snap.ColdAt.IsZero() {
		t.Fatalf("Scrape before Run took a snapshot of its own (ColdAt %v)", snap.ColdAt)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan struct{})
	before := sensor.Latest()
	go func() { sensor.Run(ctx); close(ran) }()
	defer func() { cancel(); <-ran }()
	for deadline := time.Now().Add(10 * time.Second); sensor.Latest() == before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Run took no snapshot at its start in 10 s")
		}
	}

	clock.Store(1)
	first := sensor.Scrape()
	if first == nil || !first.ColdAt.Equal(now()) || sensor.Latest() != first {
		t.Fatalf("the first Scrape under Run: ColdAt %v, newest %v; want a cold snapshot at %v, made the newest", first.ColdAt, sensor.Latest() == first, now())
	}
	c, ok := find(first, memRel(cold))
	if !ok || !c.MemoryAt.Equal(now()) {
		t.Fatalf("the cold cgroup in the scrape's snapshot: found %v, read at %v, want %v", ok, c.MemoryAt, now())
	}
	clock.Store(5)
	sensor.Fresh(t.Context()) // a tick's snapshot: the cold reading carried
	if snap := sensor.Scrape(); snap != sensor.Latest() || !snap.ColdAt.Equal(first.ColdAt) {
		t.Fatalf("Scrape within the interval took a snapshot (ColdAt %v), want the newest, which carries %v", snap.ColdAt, first.ColdAt)
	}
	clock.Store(6)
	got := make([]*pressure.Snapshot, 8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() { got[i] = sensor.Scrape() })
	}
	wg.Wait()
	for i, snap := range got {
		if snap != got[0] || !snap.ColdAt.Equal(now()) {
			t.Fatalf("scrape %d after the interval: ColdAt %v (same as the first caller's: %v), want one new cold snapshot at %v", i, snap.ColdAt, snap == got[0], now())
		}
	}
}

// Once Run has returned, Scrape takes no snapshot (the Snapshotter may
// be closing under it): it hands out the newest one as it is.
func TestScrapeTakesNoSnapshotOnceRunHasReturned(t *testing.T) {
	snapper := sandboxSnapshotter(t)
	var clock atomic.Int64
	base := time.Now()
	now := func() time.Time { return base.Add(time.Duration(clock.Load()) * time.Second) }
	sensor := pressure.NewSensor(snapper, time.Hour, now)
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan struct{})
	go func() { sensor.Run(ctx); close(ran) }()
	for deadline := time.Now().Add(10 * time.Second); sensor.Latest() == nil; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Run took no snapshot at its start in 10 s")
		}
	}
	cancel()
	<-ran
	last := sensor.Latest()
	clock.Store(60)
	if snap := sensor.Scrape(); snap != last {
		t.Fatalf("Scrape after Run returned took a snapshot (at %v), want the newest as it was (%v)", snap.Time, last.Time)
	}
}
