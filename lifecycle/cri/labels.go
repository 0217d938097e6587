package cri

import (
	"encoding/json"
	"hash/fnv"
	"maps"
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// Labels the kubelet puts on sandboxes and containers
// (k8s.io/kubelet/pkg/types), so that crictl and other tooling recognise
// nodeguard's pods, and nodeguard's own.
const (
	PodNameLabel       = "io.kubernetes.pod.name"
	PodNamespaceLabel  = "io.kubernetes.pod.namespace"
	PodUIDLabel        = "io.kubernetes.pod.uid"
	ContainerNameLabel = "io.kubernetes.container.name"

	// ManagedLabel marks nodeguard's sandboxes and containers; its value is
	// always "true". The kubelet has no such label: it takes every sandbox
	// it finds as its own.
	ManagedLabel = "nodeguard.io/managed"
)

// Container annotations the kubelet writes (pkg/kubelet/kuberuntime/labels.go).
const (
	ContainerHashAnnotation                     = "io.kubernetes.container.hash"
	ContainerRestartCountAnnotation             = "io.kubernetes.container.restartCount"
	ContainerTerminationMessagePathAnnotation   = "io.kubernetes.container.terminationMessagePath"
	ContainerTerminationMessagePolicyAnnotation = "io.kubernetes.container.terminationMessagePolicy"
	ContainerPreStopHandlerAnnotation           = "io.kubernetes.container.preStopHandler"
	ContainerPortsAnnotation                    = "io.kubernetes.container.ports"
	ContainerTypeAnnotation                     = "io.kubernetes.container.type"
	PodDeletionGracePeriodAnnotation            = "io.kubernetes.pod.deletionGracePeriod"
	PodTerminationGracePeriodAnnotation         = "io.kubernetes.pod.terminationGracePeriod"
)

// Values of ContainerTypeAnnotation.
const (
	ContainerTypeInit      = "init"
	ContainerTypeContainer = "container"
)

func podLabels(pod *corev1.Pod) map[string]string {
	l := make(map[string]string, len(pod.Labels)+4)
	maps.Copy(l, pod.Labels)
	l[PodNameLabel] = pod.Name
	l[PodNamespaceLabel] = pod.Namespace
	l[PodUIDLabel] = string(pod.UID)
	l[ManagedLabel] = "true"
	return l
}

func containerLabels(pod *corev1.Pod, c *corev1.Container) map[string]string {
	return map[string]string{
		PodNameLabel:       pod.Name,
		PodNamespaceLabel:  pod.Namespace,
		PodUIDLabel:        string(pod.UID),
		ContainerNameLabel: c.Name,
		ManagedLabel:       "true",
	}
}

// containerAnnotations are newContainerAnnotations' annotations. The hash is
// FNV-1a (32 bit, hex) of the container's JSON: the kubelet hashes selected
// fields through go-spew, a value nobody recomputes outside the kubelet, so
// nodeguard's hash only serves its own change detection.
func containerAnnotations(pod *corev1.Pod, c *corev1.Container, restartCount uint32) map[string]string {
	a := map[string]string{
		ContainerHashAnnotation:                     HashContainer(c),
		ContainerRestartCountAnnotation:             strconv.FormatUint(uint64(restartCount), 10),
		ContainerTerminationMessagePathAnnotation:   c.TerminationMessagePath,
		ContainerTerminationMessagePolicyAnnotation: string(c.TerminationMessagePolicy),
	}
	if pod.DeletionGracePeriodSeconds != nil {
		a[PodDeletionGracePeriodAnnotation] = strconv.FormatInt(*pod.DeletionGracePeriodSeconds, 10)
	}
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		a[PodTerminationGracePeriodAnnotation] = strconv.FormatInt(*pod.Spec.TerminationGracePeriodSeconds, 10)
	}
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		if b, err := json.Marshal(c.Lifecycle.PreStop); err == nil {
			a[ContainerPreStopHandlerAnnotation] = string(b)
		}
	}
	if len(c.Ports) > 0 {
		if b, err := json.Marshal(c.Ports); err == nil {
			a[ContainerPortsAnnotation] = string(b)
		}
	}
	switch {
	case hasContainer(pod.Spec.InitContainers, c.Name):
		a[ContainerTypeAnnotation] = ContainerTypeInit
	case hasContainer(pod.Spec.Containers, c.Name):
		a[ContainerTypeAnnotation] = ContainerTypeContainer
	}
	return a
}

// HashContainer returns the value of ContainerHashAnnotation for c: FNV-1a
// (32 bit) of its JSON encoding, in hex. It changes whenever the spec does.
func HashContainer(c *corev1.Container) string {
	b, err := json.Marshal(c)
	if err != nil {
		// A corev1.Container always encodes; an error here is a bug in
		// k8s.io/api, and an empty hash simply never matches.
		return ""
	}
	h := fnv.New32a()
	h.Write(b)
	return strconv.FormatUint(uint64(h.Sum32()), 16)
}

func hasContainer(list []corev1.Container, name string) bool {
	for i := range list {
		if list[i].Name == name {
			return true
		}
	}
	return false
}
