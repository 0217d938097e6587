package oom

import (
	"time"

	"github.com/nodeguard/nodeguard/loader/event"
)

// Timing is when each stage of one decision happened.
type Timing struct {
	// Crossed is the earliest evidence of the pressure: the time passed
	// to Wake by the earliest wake-up the evaluation served (a tripwire,
	// a PSI trigger, a kernel event), else the snapshot's time.
	Crossed time.Time
	// Detected is when the manager's loop woke for the evaluation.
	Detected time.Time
	// Decided is when the policy returned the decision.
	Decided time.Time
	// Snapshotted is when the fresh snapshot the decision was made on was
	// in hand (Detected..Snapshotted is the wait for a snapshot in
	// progress, the read and its observers); SnapshotRead is how long the
	// read itself took. The rest of Decide is joining pods and policy.
	Snapshotted  time.Time
	SnapshotRead time.Duration
	// KillSent is when Actor.Evict returned (the kill sent for a hard
	// eviction, the stop requested for a soft one); zero in dry run.
	KillSent time.Time
	// Released is when the victim's memory was seen released: its cgroup
	// working set below ReleasedFraction of its usage at decision time,
	// or the pod or its cgroup gone, or Manager.Released called. Zero
	// until then (in OnDecision).
	Released time.Time
	// Err is Actor.Evict's error; the policy then forgets the decision
	// and the next evaluation decides again.
	Err error
}

// since returns b - a, 0 when either is unset.
func since(a, b time.Time) time.Duration {
	if a.IsZero() || b.IsZero() {
		return 0
	}
	return b.Sub(a)
}

// Detect is Detected - Crossed: how long the evidence waited for the loop.
func (t Timing) Detect() time.Duration { return since(t.Crossed, t.Detected) }

// Decide is Decided - Detected: the snapshot and the evaluation.
func (t Timing) Decide() time.Duration { return since(t.Detected, t.Decided) }

// Kill is KillSent - Decided: the actor's work until Evict returned.
func (t Timing) Kill() time.Duration { return since(t.Decided, t.KillSent) }

// Release is Released - KillSent: until the memory was seen free.
func (t Timing) Release() time.Duration { return since(t.KillSent, t.Released) }

// Total is from Crossed to the last stage reached.
func (t Timing) Total() time.Duration {
	for _, end := range []time.Time{t.Released, t.KillSent, t.Decided} {
		if !end.IsZero() {
			return since(t.Crossed, end)
		}
	}
	return 0
}

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
