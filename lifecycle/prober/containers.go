package prober

import corev1 "k8s.io/api/core/v1"

// Containers returns the containers of pod whose probes run, as the
// kubelet's prober manager picks them: the app containers and the sidecars
// (init containers with restartPolicy Always, KEP-753). Other init
// containers run to completion and have no probes.
func Containers(pod *corev1.Pod) []*corev1.Container {
	out := make([]*corev1.Container, 0, len(pod.Spec.Containers)+len(pod.Spec.InitContainers))
	for i := range pod.Spec.Containers {
		out = append(out, &pod.Spec.Containers[i])
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			out = append(out, c)
		}
	}
	return out
}
