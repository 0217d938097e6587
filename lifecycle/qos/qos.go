package qos

import (
	corev1 "k8s.io/api/core/v1"
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

// PodRequests returns the pod's effective requests as
// k8s.io/component-helpers/resource.PodRequests computes them (without pod
// overhead and pod-level resources, which nodeguard refuses): the sum over
// app containers and sidecars, or, per resource, the largest amount any init
// container step needs while it runs (itself plus the sidecars started before
// it) when that is larger.
func PodRequests(pod *corev1.Pod) corev1.ResourceList {
	return aggregate(pod, EffectiveRequests)
}

// PodLimits is PodRequests for limits (component-helpers PodLimits). A
// resource is present only if some container limits it; whether every
// container does is the caller's question (see kubepods.PodResources).
func PodLimits(pod *corev1.Pod) corev1.ResourceList {
	return aggregate(pod, func(c *corev1.Container) corev1.ResourceList { return c.Resources.Limits })
}

func aggregate(pod *corev1.Pod, of func(*corev1.Container) corev1.ResourceList) corev1.ResourceList {
	sum := corev1.ResourceList{}
	for i := range pod.Spec.Containers {
		addTo(sum, of(&pod.Spec.Containers[i]))
	}
	sidecars := corev1.ResourceList{}
	initMax := corev1.ResourceList{}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		step := corev1.ResourceList{}
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			// A sidecar keeps running next to the app containers.
			addTo(sum, of(c))
			addTo(sidecars, of(c))
			addTo(step, sidecars)
		} else {
			addTo(step, of(c))
			addTo(step, sidecars)
		}
		maxInto(initMax, step)
	}
	maxInto(sum, initMax)
	return sum
}

func addTo(dst, src corev1.ResourceList) {
	for name, q := range src {
		v := dst[name].DeepCopy()
		v.Add(q)
		dst[name] = v
	}
}

func maxInto(dst, src corev1.ResourceList) {
	for name, q := range src {
		if cur, ok := dst[name]; !ok || q.Cmp(cur) > 0 {
			dst[name] = q.DeepCopy()
		}
	}
}

// memoryRequest is the container's defaulted memory request in bytes.
func memoryRequest(c *corev1.Container) int64 {
	q, ok := EffectiveRequests(c)[corev1.ResourceMemory]
	if !ok {
		return 0
	}
	return q.Value()
}
