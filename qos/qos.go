package qos

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// qosResources are the only resources that decide a QoS class
// (supportedQoSComputeResources in pkg/apis/core/v1/helper/qos/qos.go).
var qosResources = [...]corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory}

// EffectiveRequests returns the container's requests after the API server's
// defaulting: every resource that has a limit but no request gets the limit
// as its request (SetDefaults_Pod in pkg/apis/core/v1/defaults.go). The
// container is not modified; the result may share no map with it.
func EffectiveRequests(c *corev1.Container) corev1.ResourceList {
	out := make(corev1.ResourceList, len(c.Resources.Requests)+len(c.Resources.Limits))
	for name, q := range c.Resources.Requests {
		out[name] = q.DeepCopy()
	}
	for name, q := range c.Resources.Limits {
		if _, ok := out[name]; !ok {
			out[name] = q.DeepCopy()
		}
	}
	return out
}

// Class returns the pod's QoS class exactly as ComputePodQOS in
// pkg/apis/core/v1/helper/qos/qos.go computes it for a defaulted pod: init
// and app containers alike; only cpu and memory count; an explicit zero is
// the same as unset. Status.QOSClass is ignored: the class is always computed
// from the spec.
func Class(pod *corev1.Pod) corev1.PodQOSClass {
	var class corev1.PodQOSClass
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			c := containerClass(&list[i])
			switch {
			case c == corev1.PodQOSBurstable:
				return corev1.PodQOSBurstable
			case class == "":
				class = c
			case class != c:
				// One container Guaranteed and another BestEffort.
				return corev1.PodQOSBurstable
			}
		}
	}
	if class == "" {
		// A pod without containers; validation refuses it.
		return corev1.PodQOSBestEffort
	}
	return class
}

// containerClass is resourceQOS of qos.go applied to one container's
// defaulted requirements.
func containerClass(c *corev1.Container) corev1.PodQOSClass {
	requests := EffectiveRequests(c)
	var class corev1.PodQOSClass
	for _, name := range qosResources {
		req, lim := requests[name], c.Resources.Limits[name]
		if req.Cmp(lim) != 0 {
			return corev1.PodQOSBurstable
		}
		bestEffort := req.IsZero()
		switch {
		case class == "" && bestEffort:
			class = corev1.PodQOSBestEffort
		case class == "":
			class = corev1.PodQOSGuaranteed
		case bestEffort != (class == corev1.PodQOSBestEffort):
			return corev1.PodQOSBurstable
		}
	}
	return class
}

// IsSidecar reports whether c is one of pod's init containers with
// restartPolicy Always (isSidecarContainer in pkg/kubelet/qos/policy.go).
func IsSidecar(pod *corev1.Pod, c *corev1.Container) bool {
	if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		return false
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == c.Name {
			return true
		}
	}
	return false
}

// podResources are the options under which PodRequests and PodLimits call
// component-helpers: no pod overhead (nodeguard has no RuntimeClass) and
// no pod-level resources (refused at validation), the spec's resources
// rather than the status' (no in-place resize).
var podResources = resourcehelper.PodResourcesOptions{ExcludeOverhead: true, SkipPodLevelResources: true}

// PodRequests returns the pod's effective requests as the scheduler and
// the kubelet's admission compute them, by
// k8s.io/component-helpers/resource.PodRequests on the defaulted pod: the
// sum over app containers and sidecars, or, per resource, the largest
// amount any init container step needs while it runs (itself plus the
// sidecars started before it) when that is larger.
func PodRequests(pod *corev1.Pod) corev1.ResourceList {
	return resourcehelper.PodRequests(defaulted(pod), podResources)
}

// PodLimits is PodRequests for limits (component-helpers PodLimits). A
// resource is present only if some container limits it; whether every
// container does is the caller's question (see kubepods.PodResources).
func PodLimits(pod *corev1.Pod) corev1.ResourceList {
	return resourcehelper.PodLimits(pod, podResources)
}

// defaulted returns pod with every container's requests replaced by
// EffectiveRequests, as the API server would have stored it; pod is not
// modified (its containers are copied, their lists are not shared).
func defaulted(pod *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{ObjectMeta: pod.ObjectMeta, Spec: pod.Spec}
	out.Spec.Containers = slices.Clone(pod.Spec.Containers)
	out.Spec.InitContainers = slices.Clone(pod.Spec.InitContainers)
	for _, list := range [][]corev1.Container{out.Spec.Containers, out.Spec.InitContainers} {
		for i := range list {
			list[i].Resources.Requests = EffectiveRequests(&list[i])
		}
	}
	return out
}

// memoryRequest is the container's defaulted memory request in bytes.
func memoryRequest(c *corev1.Container) int64 {
	q, ok := EffectiveRequests(c)[corev1.ResourceMemory]
	if !ok {
		return 0
	}
	return q.Value()
}
