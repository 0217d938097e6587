// Package qos computes a pod's Kubernetes quality-of-service class, its
// containers' oom_score_adj, and whether it is critical, with the kubelet's
// semantics. It is pure: no kernel access, no clock, no logging.
//
// Sources the behaviour was checked against (kubernetes/kubernetes):
//
//   - pkg/apis/core/v1/helper/qos/qos.go (ComputePodQOS): only cpu and memory
//     count; init containers count like app containers; a zero quantity counts
//     as unset; a pod is Guaranteed only when every container sets requests
//     equal to limits for both cpu and memory.
//   - pkg/apis/core/v1/defaults.go (SetDefaults_Pod): a container that sets a
//     limit but no request gets the limit as its request. The API server (and
//     the kubelet's static-pod decoder) default before anything computes a
//     class, so Class, PodRequests and OOMScoreAdj apply the same rule to
//     pods that were never defaulted.
//   - pkg/kubelet/qos/policy.go (GetContainerOOMScoreAdjust): node-critical
//     pods and Guaranteed pods get -997, BestEffort 1000, Burstable
//     1000 - 1000*request/capacity clamped to [3, 999]; a sidecar (an init
//     container with restartPolicy Always) never scores above the regular
//     container with the smallest memory request.
//   - pkg/kubelet/types/pod_update.go (IsCriticalPod, IsNodeCriticalPod):
//     critical means priority >= 2000000000; node-critical additionally needs
//     priorityClassName system-node-critical.
//   - k8s.io/component-helpers/resource (PodRequests, PodLimits), which
//     PodRequests and PodLimits call on the defaulted pod: a pod's requests
//     are the sum over app containers and sidecars, or the largest
//     init-container step (an init container plus the sidecars before it)
//     when that is larger. component-helpers has no QoS class function
//     (ComputePodQOS lives in k8s.io/kubernetes), so Class is the kubelet's
//     rule written out: sidecars count like every init container.
//
// Invariants and deliberate differences:
//
//   - The kubelet treats every static pod as critical (IsStaticPod). nodeguard's
//     pods come from manifests too, but they are ordinary pods here: only the
//     priority makes a pod critical, otherwise no manifest pod could ever be
//     evicted.
//   - Pod-level resources (spec.resources, the PodLevelResources feature) are
//     not considered: nodeguard rejects them at validation, so every function
//     here behaves as the kubelet with that feature gate off.
//   - OOMScoreAdj returns an error for a non-positive memory capacity instead
//     of dividing by zero, and computes 1000*request/capacity without
//     overflowing int64.
package qos
