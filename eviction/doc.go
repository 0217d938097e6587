// Package eviction decides on memory, disk and PID pressure, as the
// kubelet's eviction manager does and with PSI rules and kernel events
// besides: the eviction policy and the manager loop that runs it.
//
// The policy (Policy) is pure: observations (a pressure snapshot turned
// into signals, the pods with their usage and ranks inputs) and the time
// in, decisions out; it keeps its own small state (when a threshold was
// first met, victims whose memory is still being released, node
// conditions with their transition period). The manager (Manager) feeds it
// from the kernel event pipeline, the pressure snapshots, PSI triggers and
// the tripwires, confirms every wake-up on a fresh snapshot, and acts
// through the Actor interface, which the lifecycle satisfies. It never
// imports the CRI.
//
// Thresholds speak the kubelet's language (ParseThresholds,
// ParseThresholdList): the same signals, quantities and percentages, hard
// thresholds (grace 0), soft ones with a mandatory grace period, minimum
// reclaim, node conditions held for evictionPressureTransitionPeriod, the
// kubelet's ranking (rankMemoryPressure, rankDiskPressureFunc,
// rankPIDPressure) and its eviction and admission messages. PSI rules
// (ParsePSIRule) add "memory.full.avg10>40 for 10s" on the node or, with
// "pod:", on each pod cgroup.
//
// TripwirePolicy places the tripwire on the pod cgroup root (package
// pressure/tripwire senses, this decides): at the pod root usage where the
// nearest memory threshold would be crossed, kept above usage by the page
// cache's allowance where the mechanism needs it, moved only by 1 MiB or
// more.
//
// Invariants of the policy:
//
//   - Time is passed in; nothing reads a clock. One Evaluate makes at most
//     one decision per Resource (memory, disk, pid, cpu, io), memory first;
//     within a resource hard thresholds go before soft ones, soft ones
//     before node PSI rules, those before pod PSI rules.
//   - Critical, exempt and static pods and pods of system-critical priority
//     are never chosen (Pod.Evictable; the kubelet's IsCriticalPod counts
//     every static pod as critical).
//   - The ranking is a total order: the kubelet's comparators, then more
//     reclaim stall, then the lower cgroup id, then the lower UID.
//   - Pending release: a victim's current usage (its usage at decision
//     time once unknown) is added to the available value of every
//     threshold until Released or Forget, until the pod leaves
//     Observations.Pods, or for PendingReleaseTimeout. Hard thresholds
//     count only hard victims, so a soft eviction in progress never holds
//     back a hard one; a hard decision may escalate a soft victim (kill it
//     now instead of a second pod). One spike never evicts two pods where
//     one suffices. Dry-run decisions are not pending.
//   - A threshold that evicted stays met until available reaches its
//     quantity plus its minimum reclaim (the kubelet's rule).
//   - A soft threshold's grace period and a PSI rule's "for" restart when
//     they stop being met; a PSI rule that fired must hold "for" again, and
//     a node PSI rule waits while a victim of its resource is pending
//     (pressure averages lag the release by up to their window).
//   - A pod the actor is still evicting (Observations.InFlight) is never
//     chosen again.
//
// Invariants of the manager:
//
//   - Every evaluation runs on a fresh snapshot; wake-ups coalesce (one
//     pending at a time, keeping the earliest evidence time), and
//     evaluations are at least MinInterval apart, except for a wake-up
//     with evidence (a tripwire's or PSI trigger's crossing time), which
//     is evaluated at once: those sources limit their own rate.
//   - Hard evictions are carried out in the loop up to "kill sent"; soft
//     ones in their own goroutine, so a graceful stop never blocks the
//     loop. A failed Evict is logged, forgotten by the policy and retried
//     by the next evaluation.
//   - Releases are checked before a pass observes: a victim whose release
//     was seen (its cgroup gone, its working set below ReleasedFraction of
//     its usage at decision time, or Released) is left out of the
//     observations from that pass on, while the actor still lists it, so
//     it is never chosen, nor escalated, again.
//   - Each decision logs one line (signal, threshold, observed, victim,
//     rank, hard, grace, dry_run, stage latencies) and each oom_score_adj
//     change one line. Kernel events other than OOM kills are never logged
//     one by one.
//   - A disk decision (nodefs.*, imagefs.*) is preceded by node-level
//     reclaim (ManagerConfig.Reclaim: dead containers, then unused
//     images), then a fresh snapshot; when no disk threshold is met there
//     with its minimum reclaim added, the decision is dropped and no pod
//     evicted (the kubelet's reclaimNodeLevelResources). A reclaim that
//     fell short is not tried again for DefaultReclaimInterval; dry run
//     reclaims nothing.
//   - oom_score_adj: Result.NextVictim's is raised to 1000 once, put back
//     when the next victim changes, pressure recedes, or Run returns. A
//     raise that failed (perhaps in part) is put back all the same, and
//     tried again while the pod stays the next victim. Dry run changes
//     nothing and evicts nothing.
//
// The local-storage decision (emptyDir sizeLimit and ephemeral-storage
// limits, the kubelet's localStorageEviction) is the subpackage
// localstorage, which the lifecycle calls on the storage it measures.
package eviction
