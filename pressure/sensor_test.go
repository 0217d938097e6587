package pressure_test

import (
	"context"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/internal/cgtest"
	"github.com/nodeguard/nodeguard/pressure"
)

// Fresh never waits for OnSnapshot (the eviction manager calls it to
// decide), and OnSnapshot still sees the snapshots in the order taken,
// the newest last, on Run's goroutine.
func TestFreshDoesNotWaitForItsObserver(t *testing.T) {
	cgtest.RequirePrivileged(t)
	parent := cgtest.New(t)
	snapper, err := pressure.New(pressure.Config{Layout: parent.Layout(), Roots: []string{parent.Rel()}, PodsRoot: parent.Rel(), Allocatable: 1 << 30, NodeFSPath: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer snapper.Close()
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
