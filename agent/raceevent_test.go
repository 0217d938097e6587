package agent

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/bench"
	"github.com/nodeguard/nodeguard/eviction"
	"github.com/nodeguard/nodeguard/lifecycle/api"
)

// TestTheRaceReadsTheAgentsEvictionEvent: what the agent writes into its
// event log for an eviction is what the race's nodeguard strategy reads.
func TestTheRaceReadsTheAgentsEvictionEvent(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 8, 0, 0, 123456789, time.UTC)
	d := eviction.Decision{Time: t0.Add(2 * time.Millisecond), ObservedAt: t0.Add(time.Millisecond), Signal: "allocatableMemory.available",
		Threshold: "allocatableMemory.available<107374182", Observed: 105e6, Hard: true,
		Victim: eviction.Pod{UID: "u1", Namespace: "bench-eviction", Name: "hog"}}
	tm := eviction.Timing{Crossed: t0, Detected: t0.Add(100 * time.Microsecond), Decided: t0.Add(2 * time.Millisecond), KillSent: t0.Add(5 * time.Millisecond)}
	events := api.NewEventLog(8)
	(&evictionObserver{events: events}).OnDecision(d, tm)
	evs := events.EventsSince(t.Context(), 0, 0)
	if len(evs) != 1 {
		t.Fatalf("%d events", len(evs))
	}
	// Through JSON, as the API serves it.
	b, err := json.Marshal(evs[0])
	if err != nil {
		t.Fatal(err)
	}
	var e api.Event
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	ev, err := bench.ParseAgentEviction(e)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Victim != "bench-eviction/hog" || ev.UID != "u1" || !ev.ObservedAt.Equal(d.ObservedAt) || !ev.KillSent.Equal(tm.KillSent) ||
		!ev.Crossed.Equal(tm.Crossed) || ev.Kill != 3*time.Millisecond || ev.Threshold != d.Threshold {
		t.Errorf("read %+v", ev)
	}
}
