package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodeguard/nodeguard/loader/event"
)

// AgentSources are what an agent's exporter serves beyond sensing's own
// (New's Options): every collector nodeguard run and nodeguard guard
// register after New goes through RegisterAgent, and docs/metrics.md's
// generator registers through it too, so that the document lists what
// the agents serve. A nil or false source registers nothing.
type AgentSources struct {
	// LogDropped counts the log records the agent's logger dropped.
	LogDropped func() uint64
	// State is the state store's collector (its records and rejects).
	State prometheus.Collector
	// EventKinds are the kernel events handed to the eviction manager;
	// EventsDropped counts those that found its queue full.
	EventKinds    []event.Kind
	EventsDropped func(event.Kind) uint64
	// Eviction registers the eviction manager's series (false: eviction
	// disabled).
	Eviction bool
	// Probes are the pods' probe results (nodeguard run).
	Probes func() []ProbeSeries
	// GC registers image and container garbage collection (nodeguard run).
	GC bool
	// Guard counts guard mode's pods and acts (nodeguard guard).
	Guard func() GuardCounts
}

// AgentMetrics are the recorders RegisterAgent made; nil where their
// source was not asked for.
type AgentMetrics struct {
	Eviction *Eviction
	GC       *GC
}

// RegisterAgent registers on e every collector of s.
func (e *Exporter) RegisterAgent(s AgentSources) (AgentMetrics, error) {
	var m AgentMetrics
	if s.LogDropped != nil {
		e.LogDropped(s.LogDropped)
	}
	if s.State != nil {
		if err := e.Registry().Register(s.State); err != nil {
			return m, fmt.Errorf("register the state store's metrics: %w", err)
		}
	}
	if s.EventsDropped != nil {
		e.EvictionEventsDropped(s.EventKinds, s.EventsDropped)
	}
	if s.Eviction {
		m.Eviction = e.Eviction()
	}
	if s.Probes != nil {
		e.ProbeResults(s.Probes)
	}
	if s.GC {
		m.GC = e.GC()
	}
	if s.Guard != nil {
		e.Guard(s.Guard)
	}
	return m, nil
}
