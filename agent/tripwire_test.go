package agent

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/eviction"
	"github.com/nodeguard/nodeguard/internal/statestore"
	"github.com/nodeguard/nodeguard/pressure"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
	"github.com/nodeguard/nodeguard/pressure/tripwire"
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

// The placement is eviction.TripwirePolicy's (tested there); the wiring arms
// where it says, and tries a failed Arm again at the next snapshot
// instead of taking the wire for armed.
func TestPodRootTripwireArmsWhereThePolicySaysAndRetriesAFailedArm(t *testing.T) {
	const capacity = 1 << 30
	th := []eviction.Threshold{{Signal: nodestats.SignalAllocatableMemoryAvailable, Value: eviction.ThresholdValue{Quantity: 100 << 20}}}
	s := &pressure.Snapshot{Signals: []nodestats.Observation{{Signal: nodestats.SignalAllocatableMemoryAvailable, Available: capacity / 2, Capacity: capacity}}}
	const line = capacity - 100<<20
	rec := &armRecorder{err: errors.New("cgroup.event_control: no such file")}
	p := &podRootTripwire{tw: rec, log: slog.New(slog.DiscardHandler), policy: eviction.NewTripwirePolicy(th, false)}
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
	th := []eviction.Threshold{{Signal: nodestats.SignalAllocatableMemoryAvailable, Value: eviction.ThresholdValue{Quantity: 100 << 20}}}
	snap := func(usage uint64) *pressure.Snapshot {
		s := &pressure.Snapshot{Signals: []nodestats.Observation{{Signal: nodestats.SignalAllocatableMemoryAvailable, Available: capacity / 2, Capacity: capacity}}}
		s.Node.Pods.Usage = usage
		return s
	}
	tw := &armRecorder{}
	p := &podRootTripwire{tw: tw, log: slog.New(slog.DiscardHandler), policy: eviction.NewTripwirePolicy(th, true)}
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

func TestTripwireWritesBoundsWhatThePodRootsTripwireWrites(t *testing.T) {
	const capacity = 8 << 30
	th := func(c eviction.ThresholdConfig) []eviction.Threshold {
		t.Helper()
		ts, err := eviction.ParseThresholds(c)
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}
	tests := []struct {
		name     string
		th       []eviction.Threshold
		capacity uint64
		want     tripwire.HighRange
	}{
		{"memory.available: up to the highest line plus the capacity",
			th(eviction.ThresholdConfig{EvictionHard: map[string]string{"memory.available": "200Mi"}}), capacity,
			tripwire.HighRange{Min: 256 << 10, Max: capacity - 200<<20 + capacity}},
		{"the smallest threshold gives the highest line",
			th(eviction.ThresholdConfig{EvictionHard: map[string]string{"memory.available": "100Mi", "allocatableMemory.available": "1Gi"}}), capacity,
			tripwire.HighRange{Min: 256 << 10, Max: capacity - 100<<20 + capacity}},
		{"a percentage resolves against the capacity",
			th(eviction.ThresholdConfig{EvictionHard: map[string]string{"memory.available": "10%"}}), capacity,
			tripwire.HighRange{Min: 256 << 10, Max: capacity - capacity/10 + capacity}},
		{"without a memory threshold nothing is the tripwire's",
			th(eviction.ThresholdConfig{EvictionHard: map[string]string{"nodefs.available": "10%"}}), capacity, tripwire.HighRange{}},
		{"without a capacity nothing is the tripwire's",
			th(eviction.ThresholdConfig{EvictionHard: map[string]string{"memory.available": "100Mi"}}), 0, tripwire.HighRange{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tripwireWrites(tt.th, tt.capacity); got != tt.want {
				t.Errorf("tripwireWrites = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestPodRootTripwireRepairsAfterAnUnreadableRecord: the adapter's
// configuration of the repair, on a fake v2 pod root. A memory.high the
// tripwire of these thresholds writes goes back to max; an operator's
// memory.high far above every line is left; the tripwire runs either way.
func TestPodRootTripwireRepairsAfterAnUnreadableRecord(t *testing.T) {
	const capacity = 4 << 30
	th, err := eviction.ParseThresholds(eviction.ThresholdConfig{EvictionHard: map[string]string{"memory.available": "200Mi"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, found, want string }{
		{"a line of the tripwire is restored to max", "3984588800", "max"},
		{"a value above every line plus the capacity is left alone", "17179869184", "17179869184"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			kube := t.TempDir()
			for name, content := range map[string]string{
				"memory.high": tt.found + "\n", "memory.current": "1048576\n", "memory.stat": "anon 0\ninactive_file 0\n",
				"memory.events.local": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n",
			} {
				if err := os.WriteFile(filepath.Join(kube, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			store, err := statestore.Open(t.TempDir(), statestore.Options{Log: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			// A record torn by a crash.
			if err := store.Put(tripwire.RecordKind, filepath.Clean(kube), map[string]string{"original": "max"}); err != nil {
				t.Fatal(err)
			}
			dir := cgroups.Dir{Hierarchy: &cgroups.Hierarchy{ID: 0}, Path: kube}
			p, err := newPodRootTripwire(dir, th, store, filepath.Join(t.TempDir(), "tripwire"), capacity, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatalf("newPodRootTripwire = %v, want a tripwire despite the bad record", err)
			}
			defer p.tw.Close()
			b, err := os.ReadFile(filepath.Join(kube, "memory.high"))
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(string(b)); got != tt.want {
				t.Errorf("memory.high = %q, want %q", got, tt.want)
			}
			if n := store.Quarantined(tripwire.RecordKind.Name); n != 1 {
				t.Errorf("%d records quarantined, want 1", n)
			}
		})
	}
}
