package qos

import (
	"errors"
	"fmt"
	"math/bits"

	corev1 "k8s.io/api/core/v1"
)

// oom_score_adj values (pkg/kubelet/qos/policy.go).
const (
	// NodeguardOOMScoreAdj is the score nodeguard itself runs with: the
	// kubelet's KubeletOOMScoreAdj, below every pod so that the agent that
	// frees memory is the last thing the kernel kills.
	NodeguardOOMScoreAdj = -999
	// GuaranteedOOMScoreAdj is given to Guaranteed and node-critical pods:
	// above the agent, below everything else.
	GuaranteedOOMScoreAdj = -997
	// BestEffortOOMScoreAdj is the maximum: BestEffort pods die first.
	BestEffortOOMScoreAdj = 1000
	// MinBurstableOOMScoreAdj is the lowest Burstable score,
	// 1000 + GuaranteedOOMScoreAdj: a Guaranteed pod using all memory scores
	// about 10 + (-997) = 13 points less than any Burstable pod could.
	MinBurstableOOMScoreAdj = 1000 + GuaranteedOOMScoreAdj
	// MaxBurstableOOMScoreAdj is the highest Burstable score: one below
	// BestEffort, so a Burstable pod always outlives a BestEffort one.
	MaxBurstableOOMScoreAdj = BestEffortOOMScoreAdj - 1

	// The kernel's bounds of oom_score_adj (OOM_SCORE_ADJ_MIN/MAX).
	minOOMScoreAdj = -1000
	maxOOMScoreAdj = 1000
)

// ErrBadCapacity is returned by OOMScoreAdj for a memory capacity that is not
// positive: the Burstable formula divides by it.
var ErrBadCapacity = errors.New("memory capacity must be positive")

// OOMScoreAdj returns the oom_score_adj for container c of pod on a node with
// memoryCapacity bytes, as GetContainerOOMScoreAdjust in
// pkg/kubelet/qos/policy.go:
//
//   - node-critical pods (IsNodeCritical) and Guaranteed pods: -997;
//   - BestEffort pods: 1000;
//   - Burstable: 1000 - 1000*memoryRequest/memoryCapacity (integer division),
//     where a sidecar uses the smaller score of its own and of the regular
//     container with the smallest memory request; then raised to 3 when below
//     3, and 1000 becomes 999.
//
// The memory request is the defaulted one (the limit when only a limit is
// set). A negative request counts as 0 (the kubelet would return more than
// 1000, which the kernel refuses).
func OOMScoreAdj(pod *corev1.Pod, c *corev1.Container, memoryCapacity int64) (int, error) {
	if memoryCapacity <= 0 {
		return 0, fmt.Errorf("oom_score_adj for %s/%s container %s: %w (got %d)",
			pod.Namespace, pod.Name, c.Name, ErrBadCapacity, memoryCapacity)
	}
	if IsNodeCritical(pod) {
		return GuaranteedOOMScoreAdj, nil
	}
	switch Class(pod) {
	case corev1.PodQOSGuaranteed:
		return GuaranteedOOMScoreAdj, nil
	case corev1.PodQOSBestEffort:
		return BestEffortOOMScoreAdj, nil
	}
	adj := burstableScore(memoryRequest(c), memoryCapacity)
	if IsSidecar(pod, c) && len(pod.Spec.Containers) > 0 {
		if m := burstableScore(minRegularMemoryRequest(pod), memoryCapacity); m < adj {
			adj = m
		}
	}
	if adj < MinBurstableOOMScoreAdj {
		return MinBurstableOOMScoreAdj, nil
	}
	if adj == BestEffortOOMScoreAdj {
		return MaxBurstableOOMScoreAdj, nil
	}
	return int(adj), nil
}

// burstableScore is 1000 - (1000*request)/capacity with the product computed
// in 128 bits, so that no request can overflow it. capacity > 0.
func burstableScore(request, capacity int64) int64 {
	if request <= 0 {
		return 1000
	}
	if request >= capacity {
		// The exact score is <= 0 and every score below 3 becomes 3, so 0
		// stands in for it without computing a product that may overflow.
		return 0
	}
	hi, lo := bits.Mul64(1000, uint64(request))
	// hi < capacity because request < capacity and 1000 < 2^64, so Div64
	// cannot overflow.
	q, _ := bits.Div64(hi, lo, uint64(capacity))
	return 1000 - int64(q)
}

// minRegularMemoryRequest is minRegularContainerMemory of policy.go: the
// smallest defaulted memory request among the app containers.
func minRegularMemoryRequest(pod *corev1.Pod) int64 {
	m := memoryRequest(&pod.Spec.Containers[0])
	for i := 1; i < len(pod.Spec.Containers); i++ {
		if v := memoryRequest(&pod.Spec.Containers[i]); v < m {
			m = v
		}
	}
	return m
}

// ClampForCapability returns the oom_score_adj that can actually be written
// for v, and whether it differs from v.
//
// The value is first bounded to the kernel's [-1000, 1000]. Then, without
// CAP_SYS_RESOURCE, the kernel refuses (EACCES) any value below the task's
// oom_score_adj_min (__set_oom_adj in fs/proc/base.c); minAllowed is that
// minimum, inherited from the process that creates the task (runc, and
// before it the agent or containerd). Such a value is raised to minAllowed.
// With CAP_SYS_RESOURCE every value in range is allowed. The caller logs
// one line when the result was clamped.
func ClampForCapability(v int, hasCapSysResource bool, minAllowed int) (int, bool) {
	out := min(max(v, minOOMScoreAdj), maxOOMScoreAdj)
	if !hasCapSysResource && out < minAllowed {
		out = min(minAllowed, maxOOMScoreAdj)
	}
	return out, out != v
}
