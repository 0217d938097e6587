package eviction

import (
	"time"

	"github.com/nodeguard/nodeguard/loader/event"
)

// OOMKillAttribution is a kernel OOM kill traced to a pod.
type OOMKillAttribution struct {
	// Pod is the pod whose cgroup holds the victim's memory cgroup; nil
	// when the victim was not in a pod (a system daemon, nodeguard's own
	// cgroup) or its cgroup is unknown.
	Pod *PodRef
	// Cgroup is the victim's memory cgroup path (the snapshot's Rel), ""
	// when unknown; Container the name of the cgroup directly beneath the
	// pod cgroup that holds it (the container's cgroup, named by the
	// runtime after the container id: the bare id with cgroupfs,
	// cri-containerd-<id>.scope with the systemd driver), "" when the
	// victim was in the pod cgroup itself or not in a pod.
	Cgroup, Container string
	PID               uint32
	Comm              string
	// Time is when the manager received the event; the event itself
	// carries the kernel's monotonic timestamp.
	Time  time.Time
	Event *event.OOMKill
}

// Observer receives what the manager sees and does, for metrics and the
// audit log. Its methods may be called from several goroutines (soft
// evictions report from their own) and must not block.
type Observer interface {
	// OnDecision reports a decision once Actor.Evict returned (at once in
	// dry run), with Timing up to KillSent and Err.
	OnDecision(Decision, Timing)
	// OnReleased reports a victim whose memory was released, with the
	// full Timing.
	OnReleased(Decision, Timing)
	// OnConditions reports the node conditions when they change (and
	// after the first evaluation).
	OnConditions(map[Condition]bool)
	// OnOOMKill reports every kernel OOM kill.
	OnOOMKill(OOMKillAttribution)
	// OnStaleness reports, at every evaluation, how old its snapshot was
	// (evaluation time - snapshot time).
	OnStaleness(time.Duration)
}

// NopObserver ignores everything; embed it to implement part of Observer.
type NopObserver struct{}

// OnDecision implements Observer.
func (NopObserver) OnDecision(Decision, Timing) {}

// OnReleased implements Observer.
func (NopObserver) OnReleased(Decision, Timing) {}

// OnConditions implements Observer.
func (NopObserver) OnConditions(map[Condition]bool) {}

// OnOOMKill implements Observer.
func (NopObserver) OnOOMKill(OOMKillAttribution) {}

// OnStaleness implements Observer.
func (NopObserver) OnStaleness(time.Duration) {}
