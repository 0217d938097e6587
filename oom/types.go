package oom

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/pressure/nodestats"
	"github.com/nodeguard/nodeguard/psi"
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

// Observations are one snapshot's view of the node, in the policy's terms.
type Observations struct {
	// Time the statistics were read (not when they are evaluated: the
	// difference is the decision's staleness).
	Time    time.Time
	Signals map[nodestats.Signal]nodestats.Observation
	// NodePSI is /proc/pressure/* (memory, cpu, io).
	NodePSI map[psi.Resource]psi.Stats
	Pods    []Pod
	// InFlight are the pods whose eviction the actor is still carrying
	// out (Evict has not returned): the policy never chooses them.
	InFlight map[types.UID]bool
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
