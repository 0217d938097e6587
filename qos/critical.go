package qos

import corev1 "k8s.io/api/core/v1"

// The built-in priority classes every Kubernetes cluster has
// (pkg/apis/scheduling/types.go).
const (
	// SystemNodeCritical is the priority class of pods the node cannot work
	// without.
	SystemNodeCritical = "system-node-critical"
	// SystemClusterCritical is the priority class of pods the cluster cannot
	// work without.
	SystemClusterCritical = "system-cluster-critical"
	// SystemNodeCriticalPriority is the value of system-node-critical
	// (SystemCriticalPriority + 1000).
	SystemNodeCriticalPriority int32 = 2000001000
	// SystemCriticalPriority is the lowest priority that makes a pod critical
	// (scheduling.SystemCriticalPriority); it is also the value of
	// system-cluster-critical.
	SystemCriticalPriority int32 = 2000000000
)

// BuiltinPriority returns the value of a built-in priority class.
func BuiltinPriority(className string) (int32, bool) {
	switch className {
	case SystemNodeCritical:
		return SystemNodeCriticalPriority, true
	case SystemClusterCritical:
		return SystemCriticalPriority, true
	}
	return 0, false
}

// Priority returns the pod's priority: spec.priority when it was resolved,
// otherwise the value of a built-in priority class named by
// spec.priorityClassName, otherwise 0 (the Kubernetes default when no global
// default class exists).
func Priority(pod *corev1.Pod) int32 {
	if pod.Spec.Priority != nil {
		return *pod.Spec.Priority
	}
	if v, ok := BuiltinPriority(pod.Spec.PriorityClassName); ok {
		return v
	}
	return 0
}

// IsCritical reports whether the pod is critical: its priority is at least
// SystemCriticalPriority (IsCriticalPodBasedOnPriority in
// pkg/kubelet/types/pod_update.go). Unlike the kubelet, being defined by a
// manifest (a static pod) does not make a pod critical; see the package
// documentation.
func IsCritical(pod *corev1.Pod) bool {
	return Priority(pod) >= SystemCriticalPriority
}

// IsNodeCritical reports whether the pod is critical and uses the
// system-node-critical priority class (IsNodeCriticalPod in
// pkg/kubelet/types/pod_update.go). Only such pods get the Guaranteed
// oom_score_adj regardless of their QoS class.
func IsNodeCritical(pod *corev1.Pod) bool {
	return IsCritical(pod) && pod.Spec.PriorityClassName == SystemNodeCritical
}
