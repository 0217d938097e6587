package agent

import (
	"context"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/cgroups/cgstat"
	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/eviction"
	"github.com/nodeguard/nodeguard/loader"
	"github.com/nodeguard/nodeguard/loader/event"
	"github.com/nodeguard/nodeguard/metrics"
	"github.com/nodeguard/nodeguard/pressure"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// oneVictim is an eviction.Actor with one pod, whose evictions succeed and
// change nothing: only an event can tell the manager the pod's memory is
// released.
type oneVictim struct{ ref eviction.PodRef }

func (a *oneVictim) Pods(bool) []eviction.PodRef                    { return []eviction.PodRef{a.ref} }
func (a *oneVictim) Evict(context.Context, eviction.Decision) error { return nil }
func (a *oneVictim) SetOOMScoreAdj(types.UID, int) error            { return nil }
func (a *oneVictim) RestoreOOMScoreAdj(types.UID) error             { return nil }

// releases is an eviction.Observer that hands decisions and releases to
// channels.
type releases struct {
	eviction.NopObserver
	decided, released chan eviction.Decision
}

func (r *releases) OnDecision(d eviction.Decision, _ eviction.Timing) { r.decided <- d }
func (r *releases) OnReleased(d eviction.Decision, _ eviction.Timing) { r.released <- d }

// pressed is a snapshot source in which memory.available stays under the
// hard threshold and the victim's cgroup keeps its working set: the
// snapshots never show a release.
func pressed(rel string, memHier uint32) func(context.Context) (*pressure.Snapshot, error) {
	return func(context.Context) (*pressure.Snapshot, error) {
		now := time.Now()
		return &pressure.Snapshot{
			Time: now,
			Signals: []nodestats.Observation{{Signal: nodestats.SignalMemoryAvailable,
				Available: 50 << 20, Capacity: 8 << 30, Time: now}},
			Cgroups: []pressure.Cgroup{{Key: pressure.CgroupKey{ID: 4242, HierarchyID: memHier}, Rel: rel,
				Memory: cgstat.Memory{Usage: 1 << 30}}},
		}, nil
	}
}

// startVictimManager runs an eviction manager that evicts the one pod at
// rel on its first wake-up and then waits for its release; Tick is an
// hour, so nothing but an event can report the release within the test.
func startVictimManager(t *testing.T, rel string, memHier uint32, events <-chan event.Event) *releases {
	t.Helper()
	thresholds, err := eviction.ParseThresholds(eviction.ThresholdConfig{EvictionHard: map[string]string{"memory.available": "100Mi"}})
	if err != nil {
		t.Fatal(err)
	}
	obs := &releases{decided: make(chan eviction.Decision, 4), released: make(chan eviction.Decision, 4)}
	actor := &oneVictim{ref: eviction.PodRef{CgroupRel: rel, Pod: eviction.Pod{UID: "u-hog", Namespace: "default", Name: "hog", QOS: "BestEffort"}}}
	em, err := eviction.NewManager(eviction.ManagerConfig{
		Policy: eviction.PolicyConfig{Thresholds: thresholds}, Actor: actor,
		Snapshot: pressed(rel, memHier), Tick: time.Hour, Observer: obs,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = em.Run(ctx) }()
	go func() { defer wg.Done(); em.Events(ctx, events) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	em.Wake("test", time.Now())
	select {
	case d := <-obs.decided:
		if d.Victim.UID != "u-hog" {
			t.Fatalf("evicted %s, want u-hog", d.Victim.UID)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the manager never evicted the victim")
	}
	return obs
}

func waitRelease(t *testing.T, obs *releases, why string) {
	t.Helper()
	select {
	case d := <-obs.released:
		if d.Victim.UID != "u-hog" {
			t.Fatalf("released %s, want u-hog", d.Victim.UID)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the manager never saw the victim's release: %s", why)
	}
}

// TestEventForwarderHandsTheManagerTheVictimsRmdir: the removal of a
// victim's pod cgroup is how the eviction manager learns at once that its
// memory is back; the forwarder must let it through.
func TestEventForwarderHandsTheManagerTheVictimsRmdir(t *testing.T) {
	const memHier = 4
	const rel = "/kubepods/besteffort/podu-hog"
	fwd := newEventForwarder(16, memHier)
	obs := startVictimManager(t, rel, memHier, fwd.ch)
	fwd.send(&event.Cgroup{Header: event.Header{Kind: event.KindCgroupRmdir}, HierarchyID: memHier, Path: rel})
	waitRelease(t, obs, "the rmdir of its pod cgroup was not forwarded")
}

// TestEventForwarderPassesWhatTheManagerActsOn: OOM kills, reclaim
// episodes and removals of memory cgroups go to the manager; everything
// else, and the removal of the same path in another hierarchy, stays out
// of its queue.
func TestEventForwarderPassesWhatTheManagerActsOn(t *testing.T) {
	const memHier = 4
	for _, tt := range []struct {
		name string
		ev   event.Event
		want bool
	}{
		{"an OOM kill is forwarded", &event.OOMKill{Header: event.Header{Kind: event.KindOOMKill}}, true},
		{"a reclaim episode is forwarded", &event.Reclaim{Header: event.Header{Kind: event.KindReclaim}}, true},
		{"a memory cgroup's rmdir is forwarded", &event.Cgroup{Header: event.Header{Kind: event.KindCgroupRmdir}, HierarchyID: memHier, Path: "/a"}, true},
		{"an rmdir in another hierarchy is not", &event.Cgroup{Header: event.Header{Kind: event.KindCgroupRmdir}, HierarchyID: 0, Path: "/a"}, false},
		{"a mkdir is not", &event.Cgroup{Header: event.Header{Kind: event.KindCgroupMkdir}, HierarchyID: memHier, Path: "/a"}, false},
		{"a process exit is not", &event.Exit{Header: event.Header{Kind: event.KindExit}}, false},
		{"an oom_score_adj change is not", &event.OOMScoreAdj{Header: event.Header{Kind: event.KindOOMScoreAdj}}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fwd := newEventForwarder(1, memHier)
			fwd.send(tt.ev)
			if got := len(fwd.ch) == 1; got != tt.want {
				t.Errorf("forwarded %v, want %v", got, tt.want)
			}
		})
	}
}

// TestSensingHandsTheManagerARealRmdir runs the agent's event consumer on
// the real eBPF pipeline with the forwarder, and removes an evicted pod's
// cgroup for real: the kernel's cgroup_rmdir must reach the manager as the
// victim's release.
func TestSensingHandsTheManagerARealRmdir(t *testing.T) {
	cgtest.RequirePrivileged(t)
	root := cgtest.New(t)
	pod := root.Child(t, "podu-hog")
	memHier := root.Layout().Memory.ID
	rel := pod.Dirs()[0].Rel // memory hierarchy first

	fwd := newEventForwarder(16, memHier)
	ctx, cancel := context.WithCancel(t.Context())
	s, err := startSensing(ctx, &senseFlags{roots: []string{root.Rel()}, rootDir: t.TempDir(), tick: time.Second,
		fullEvery: time.Hour, onEvent: fwd.send}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	// consumeEvents alone, not Serve: Serve returns before the sensor
	// goroutines it starts have ended, and Close would race with them.
	consumed := make(chan struct{})
	go func() { s.consumeEvents(ctx); close(consumed) }()
	t.Cleanup(func() {
		cancel()
		<-consumed
		s.Close()
	})
	if s.pipeline == nil {
		t.Fatal("no eBPF pipeline")
	}
	for _, h := range s.pipeline.Hooks() {
		if h.Name == "cgroup_rmdir" && h.Path == loader.PathOff {
			t.Fatalf("cgroup_rmdir not attached: %v", h.Failures)
		}
	}

	obs := startVictimManager(t, rel, memHier, fwd.ch)
	if err := pod.Remove(); err != nil {
		t.Fatal(err)
	}
	waitRelease(t, obs, "the kernel's rmdir of its pod cgroup "+rel+" did not reach the manager")
}

// TestEventForwarderDropsAreExported: what the forwarder drops on a full
// queue shows on /metrics, by kind.
func TestEventForwarderDropsAreExported(t *testing.T) {
	const memHier = 4
	fwd := newEventForwarder(1, memHier)
	e := metrics.New(metrics.Options{Snapshots: noSnapshot{}})
	e.EvictionEventsDropped(forwardedKinds(), fwd.Dropped)
	fwd.send(&event.Reclaim{Header: event.Header{Kind: event.KindReclaim}}) // fills the queue
	for range 3 {
		fwd.send(&event.OOMKill{Header: event.Header{Kind: event.KindOOMKill}})
	}
	fwd.send(&event.Cgroup{Header: event.Header{Kind: event.KindCgroupRmdir}, HierarchyID: memHier, Path: "/a"})
	fwd.send(&event.Exit{Header: event.Header{Kind: event.KindExit}}) // not forwarded, so not dropped

	mfs, err := e.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "nodeguard_eviction_events_dropped_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" {
					got[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	want := map[string]float64{"oom_kill": 3, "reclaim": 0, "cgroup_rmdir": 1}
	if !maps.Equal(got, want) {
		t.Errorf("nodeguard_eviction_events_dropped_total by kind = %v, want %v", got, want)
	}
}
