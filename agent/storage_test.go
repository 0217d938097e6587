package agent

import (
	"log/slog"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/eviction"
	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/metrics"
	"github.com/nodeguard/nodeguard/pressure"
)

// noSnapshot is a sensor that has not read anything yet.
type noSnapshot struct{}

func (noSnapshot) Scrape() *pressure.Snapshot { return nil }

// evictionsBySignal reads kubelet_evictions from the exporter's registry.
func evictionsBySignal(t *testing.T, e *metrics.Exporter) map[string]float64 {
	t.Helper()
	mfs, err := e.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "kubelet_evictions" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "eviction_signal" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// TestDecisionRelay: local-storage evictions made before the eviction
// observer exists are counted once it does, under the kubelet's signal,
// and the ones beyond the bound are reported as lost, not blocked on.
func TestDecisionRelay(t *testing.T) {
	e := metrics.New(metrics.Options{Snapshots: noSnapshot{}})
	events := api.NewEventLog(1024)
	obs := &evictionObserver{m: e.Eviction(), events: events, log: slog.New(slog.DiscardHandler)}
	r := &decisionRelay{}
	d := eviction.Decision{Signal: lifecycle.SignalEmptyDirFsLimit, Message: "m"}
	now := time.Now()
	for range earlyDecisions + 2 {
		r.OnDecision(d, eviction.Timing{Decided: now, KillSent: now})
	}
	if lost := r.bind(obs); lost != 2 {
		t.Errorf("bind reports %d lost, want 2 beyond the bound of %d", lost, earlyDecisions)
	}
	r.OnDecision(eviction.Decision{Signal: lifecycle.SignalEphemeralPodFsLimit}, eviction.Timing{Decided: now, KillSent: now})
	got := evictionsBySignal(t, e)
	if got[lifecycle.SignalEmptyDirFsLimit] != earlyDecisions || got[lifecycle.SignalEphemeralPodFsLimit] != 1 {
		t.Errorf("kubelet_evictions by signal = %v, want %d %s and 1 %s", got, earlyDecisions,
			lifecycle.SignalEmptyDirFsLimit, lifecycle.SignalEphemeralPodFsLimit)
	}
	if n := len(events.EventsSince(t.Context(), 0, 0)); n != earlyDecisions+1 {
		t.Errorf("%d events in the API's log, want %d", n, earlyDecisions+1)
	}
}
