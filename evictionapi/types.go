package evictionapi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/pressure/nodestats"
	"github.com/nodeguard/nodeguard/psi"
)

// SystemCriticalPriority is the kubernetes scheduling.SystemCriticalPriority
// (the value of system-cluster-critical): a pod at or above it is
// critical for the kubelet (IsCriticalPodBasedOnPriority).
const SystemCriticalPriority int32 = 2_000_000_000

const (
	// NextVictimOOMScoreAdj is the oom_score_adj given to the next victim,
	// so that the kernel OOM killer, if it strikes first, kills the pod
	// nodeguard would have evicted.
	NextVictimOOMScoreAdj = 1000
)

var (
	// ErrNotAdmitted reports a pod refused by Admit. Such errors are
	// *AdmitError values.
	ErrNotAdmitted = errors.New("pod not admitted")

	// ErrEvictionRefused reports an eviction that someone else refused
	// for now: the API server's Eviction API, for a PodDisruptionBudget
	// (guard mode's soft evictions). The manager forgets the decision as
	// for any failure, but does not evaluate again at once: the next
	// tick or wake-up decides again, and the actor bounds how often it
	// asks (a refusal is never bypassed).
	ErrEvictionRefused = errors.New("eviction refused")
)

// Pod is what the policy knows of one running pod.
type Pod struct {
	UID             types.UID
	Namespace, Name string
	QOS             corev1.PodQOSClass
	Priority        int32
	// Critical pods (the kubelet's IsCriticalPod: static/mirror pods,
	// priority >= system-cluster-critical) and Exempt ones (the
	// configured list) are never evicted.
	Critical, Exempt bool
	// Refused: someone refused to let the pod go for now (guard mode: a
	// PodDisruptionBudget, through the Eviction API) and it is not to be
	// asked again yet. Soft decisions pass it by for the next pod, which
	// is no bypass of the refusal; a hard one may still take it.
	Refused bool
	// Static pods come from the manifest directory. The kubelet's
	// IsCriticalPod counts every static (and mirror) pod as critical,
	// whatever its priority, so the policy never evicts one either (see
	// Evictable).
	Static bool
	// MemoryRequest is the sum of the containers' memory requests,
	// MemoryUsage the pod cgroup's working set (bytes).
	MemoryRequest, MemoryUsage int64
	// UsageUnknown: the pod cgroup was not in the snapshot (or its
	// reading failed), so MemoryUsage is unknown. The kubelet ranks pods
	// without stats first for memory pressure, and so does the policy.
	UsageUnknown bool
	// EphemeralRequest and EphemeralUsage: ephemeral-storage (bytes).
	EphemeralRequest, EphemeralUsage int64
	// Inodes is the number of inodes the pod uses on the node
	// filesystems (writable layers, logs, local volumes): the ranking of
	// the inodesFree signals. InodesUnknown: there is no figure (the pod
	// started after the last storage sample); the kubelet ranks such a
	// pod first, and so does the policy.
	Inodes        int64
	InodesUnknown bool
	// PIDs is the number of tasks in the pod cgroup (its pids.current),
	// the ranking of pid.available; PIDsUnknown: it could not be read,
	// and the pod goes first among those of its priority (the kubelet's
	// pod without stats).
	PIDs        int64
	PIDsUnknown bool
	// ReclaimStall is the time its tasks spent in memory reclaim (eBPF
	// aggregates), the first tie-breaker after the kubelet's order.
	ReclaimStall time.Duration
	// CgroupID is the pod cgroup's id (memory hierarchy), the last
	// tie-breaker.
	CgroupID uint64
	// GracePeriod is the pod's terminationGracePeriodSeconds.
	GracePeriod time.Duration
	// PSI is the pod cgroup's memory pressure (for per-pod PSI rules);
	// HasPSI says whether it was read.
	PSI    psi.Stats
	HasPSI bool
	// CPUPSI and IOPSI are the pod cgroup's cpu and io pressure (cgroup2
	// only, refreshed on the snapshot's slow ticks), for per-pod cpu and
	// io rules.
	CPUPSI, IOPSI       psi.Stats
	HasCPUPSI, HasIOPSI bool
}

// Evictable reports whether the policy may evict p. It follows the
// kubelet's evictPod, which refuses every pod for which
// kubetypes.IsCriticalPod holds: static pods, mirror pods and pods of
// priority SystemCriticalPriority or above. (Before Kubernetes 1.16 only
// pods both static and critical were spared; current kubelets spare every
// static pod, whatever its priority, and so does nodeguard.) Exempt pods
// (nodeguard's configured list) are never evicted either.
func (p *Pod) Evictable() bool {
	return !p.Critical && !p.Exempt && !p.Static && p.Priority < SystemCriticalPriority
}

// Condition is a node condition the kubelet reports.
type Condition string

// The node conditions.
const (
	MemoryPressure Condition = "MemoryPressure"
	DiskPressure   Condition = "DiskPressure"
	PIDPressure    Condition = "PIDPressure"
)

// Decision is one eviction the policy asks for.
type Decision struct {
	// Time the policy decided, and the observations' time it used.
	Time, ObservedAt time.Time
	// Signal that crossed ("memory.available", or a PSI rule's text),
	// the threshold as configured ("memory.available<100Mi") and the
	// value observed (bytes/count; for PSI the percentage).
	Signal    string
	Threshold string
	Observed  float64
	// Resource is what the decision reclaims; the policy makes at most one
	// decision per resource per evaluation.
	Resource Resource
	// Hard: kill now (grace 0) and release memory first; otherwise a soft
	// eviction, stopping the pod with GracePeriod.
	Hard        bool
	GracePeriod time.Duration
	Victim      Pod
	// Rank is the victim's place in the ranking (0 = first).
	Rank   int
	DryRun bool
	// Message is the pod status message, as the kubelet writes it
	// ("The node was low on resource: memory. Threshold quantity: ...").
	Message string
}

// Staleness is Time - ObservedAt: how old the statistics were when the
// policy decided on them.
func (d Decision) Staleness() time.Duration { return since(d.ObservedAt, d.Time) }

// Actor is what the manager acts through; the lifecycle satisfies it.
type Actor interface {
	// Pods lists the running pods with their QoS, priority, requests and
	// pod cgroup (usage is filled from the snapshot by the manager). It
	// may stop listing a pod once its eviction starts: the manager keeps
	// a victim in its observations while the victim's cgroup exists.
	// calm: the manager is far from every threshold and ranks nothing by
	// pids (Policy.Calm), so the pods' task counts may be left unread
	// (PIDsUnknown): at 250 pods reading them every second was a tenth
	// of the manager's calm ticks.
	Pods(calm bool) []PodRef
	// Evict ends a pod: hard (grace 0) kills its processes through its
	// cgroup first (cgroup.kill on v2, SIGKILL over cgroup.procs on v1),
	// then stops and removes it through the runtime; soft stops it with
	// the grace period. The pod is marked Failed, reason Evicted, with
	// the message. It returns once the kill was sent (hard) or the stop
	// requested (soft); the rest completes in the background.
	Evict(ctx context.Context, d Decision) error
	// SetOOMScoreAdj sets the oom_score_adj of every process of a pod,
	// the sandbox's included (raising the next victim under pressure);
	// Restore puts back on each process it raised the value that process
	// had, and gives container processes that joined since the kubelet's
	// value for their container.
	SetOOMScoreAdj(uid types.UID, adj int) error
	RestoreOOMScoreAdj(uid types.UID) error
}

// PodRef is a pod as the lifecycle describes it to the manager.
type PodRef struct {
	Pod
	// CgroupRel is the pod cgroup's path relative to the memory
	// hierarchy root as the snapshot names it (pressure.Cgroup.Rel).
	CgroupRel string
}

// Resource is what a decision reclaims. The policy makes at most one
// decision per Resource per evaluation, and cool-downs are per Resource.
type Resource string

// The resources.
const (
	// ResourceMemory: memory.available, allocatableMemory.available and
	// memory PSI rules.
	ResourceMemory Resource = "memory"
	// ResourceDisk: nodefs/imagefs space and inodes.
	ResourceDisk Resource = "disk"
	// ResourcePID: pid.available.
	ResourcePID Resource = "pid"
	// ResourceCPU and ResourceIO: cpu and io PSI rules.
	ResourceCPU Resource = "cpu"
	ResourceIO  Resource = "io"
)

// NodeReclaimer frees node-level resources before pods are evicted for
// them: the kubelet's signalToNodeReclaimFuncs (dead containers and
// sandboxes, then unused images, for the disk signals). The lifecycle
// satisfies it.
type NodeReclaimer interface {
	// ReclaimNode runs the reclaim functions of signal and reports
	// whether it has any: with none, nothing was done and the eviction
	// goes ahead without a fresh look.
	ReclaimNode(ctx context.Context, signal nodestats.Signal) (ran bool, err error)
}

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

// SnapshotWait is Snapshotted - Detected: the wait for a fresh snapshot,
// its read and its observers.
func (t Timing) SnapshotWait() time.Duration { return since(t.Detected, t.Snapshotted) }

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

// AdmitError is the refusal of a pod under node pressure, as the
// kubelet's eviction admission handler words it: reason Evicted, message
// "The node had condition: [MemoryPressure]." It matches ErrNotAdmitted.
type AdmitError struct {
	// Conditions are the node conditions that held, in a fixed order
	// (MemoryPressure, DiskPressure, PIDPressure).
	Conditions []Condition
}

// AdmitReason is the pod status reason of a refused pod, the kubelet's.
const AdmitReason = "Evicted"

// Error implements error with the kubelet's message.
func (e *AdmitError) Error() string {
	names := make([]string, len(e.Conditions))
	for i, c := range e.Conditions {
		names[i] = string(c)
	}
	return fmt.Sprintf("The node had condition: [%s].", strings.Join(names, " "))
}

// Unwrap returns ErrNotAdmitted.
func (e *AdmitError) Unwrap() error { return ErrNotAdmitted }
