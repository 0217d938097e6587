package agent

import (
	"sync/atomic"

	"github.com/nodeguard/nodeguard/loader/event"
)

// eventForwarder hands the eviction manager (oom.Manager.Events) the
// kernel events it acts on, without ever blocking the sensing loop: OOM
// kills and reclaim episodes, which wake it, and the removal of memory
// cgroups, by which it sees a victim's memory released at once instead of
// at its next evaluation. When the manager's queue is full the event is
// dropped and counted by kind (nodeguard_eviction_events_dropped_total);
// the safety tick and the release poll still run.
type eventForwarder struct {
	ch chan event.Event
	// memHier is the memory controller's hierarchy: the manager names
	// cgroups by their path in it, and an rmdir of the same path in
	// another hierarchy says nothing about the memory cgroup.
	memHier uint32
	// dropped has one counter per forwarded kind; the map itself is never
	// written after newEventForwarder.
	dropped map[event.Kind]*atomic.Uint64
}

// forwardedKinds are the kinds the eviction manager acts on.
func forwardedKinds() []event.Kind {
	return []event.Kind{event.KindOOMKill, event.KindReclaim, event.KindCgroupRmdir}
}

// newEventForwarder makes a forwarder with a queue of size events.
func newEventForwarder(size int, memHier uint32) *eventForwarder {
	f := &eventForwarder{ch: make(chan event.Event, size), memHier: memHier, dropped: map[event.Kind]*atomic.Uint64{}}
	for _, k := range forwardedKinds() {
		f.dropped[k] = new(atomic.Uint64)
	}
	return f
}

// send queues ev for the manager when it is one the manager acts on. It
// never blocks.
func (f *eventForwarder) send(ev event.Event) {
	switch e := ev.(type) {
	case *event.OOMKill, *event.Reclaim:
	case *event.Cgroup:
		if e.Kind != event.KindCgroupRmdir || e.HierarchyID != f.memHier {
			return
		}
	default:
		return
	}
	select {
	case f.ch <- ev:
	default:
		f.dropped[ev.Hdr().Kind].Add(1)
	}
}

// Dropped returns how many events of kind k found the queue full.
func (f *eventForwarder) Dropped(k event.Kind) uint64 {
	if c := f.dropped[k]; c != nil {
		return c.Load()
	}
	return 0
}
