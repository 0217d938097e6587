// Package localstorage is the kubelet's local-storage eviction decision
// (LocalStorageCapacityIsolation): a pod whose emptyDir holds more than its
// sizeLimit, whose ephemeral storage is past the sum of its containers'
// limits, or one of whose containers is past its own, is to be evicted,
// with the kubelet's signal and message. It decides on measurements its
// caller makes (the lifecycle walks the volumes, layers and logs) and
// knows nothing of how they are made.
package localstorage

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/nodeguard/nodeguard/qos"
)

// The kubelet's local-storage eviction signals (pkg/kubelet/eviction,
// eviction_manager.go), the eviction_signal label of kubelet_evictions.
const (
	SignalEmptyDirFsLimit           = "emptydirfs.limit"
	SignalEphemeralPodFsLimit       = "ephemeralpodfs.limit"
	SignalEphemeralContainerFsLimit = "ephemeralcontainerfs.limit"
)

// The kubelet's messages for these evictions (pkg/kubelet/eviction,
// helpers.go), word for word: tools match on them.
const (
	emptyDirMessageFmt                  = "Usage of EmptyDir volume %q exceeds the limit %q. "
	podEphemeralStorageMessageFmt       = "Pod ephemeral local storage usage exceeds the total limit of containers %s. "
	containerEphemeralStorageMessageFmt = "Container %s exceeded its local ephemeral storage limit %q. "
)

// Usage is one pod's measured local storage, what the
// local-storage decision reads; the act room that measures it (the
// lifecycle) fills it.
type Usage struct {
	// EmptyDirs are the bytes in each measured emptyDir, by volume name.
	EmptyDirs map[string]uint64
	// Ephemeral is what counts against the pod's ephemeral-storage limit:
	// every volume not backed by memory, writable layers and logs.
	Ephemeral uint64
	// Containers are each measured container's writable layer and logs,
	// by container name.
	Containers map[string]uint64
}

// Violation is the first of a pod's local-storage limits its
// usage is past, in the kubelet's order: emptyDir sizeLimits, then the
// pod's total, then each container's.
type Violation struct {
	Signal string
	// Threshold names the limit and its value, as a field path of the pod.
	Threshold string
	Used      uint64
	Message   string
}

// Check is the kubelet's localStorageEviction decision for one pod,
// given its measured storage. Like the kubelet: every emptyDir with a
// positive sizeLimit is checked (a memory-backed one is a tmpfs of at most
// that size, so it can pass it only by rounding to whole pages); the pod's
// total counts disk-backed emptyDirs, writable layers and logs of every
// container, against qos.PodLimits (the sum of the containers' limits, or
// an init container's if larger), if any container has one; a
// container's own use is its writable layer and logs, for app containers
// with a non-zero limit. A pod with none of these limits is never in
// violation, whatever it uses.
func Check(pod *corev1.Pod, s Usage) (Violation, bool) {
	used := s.EmptyDirs
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.Sign() != 1 {
			continue
		}
		u, measured := used[v.Name]
		if lim := v.EmptyDir.SizeLimit; measured && exceeds(u, lim) {
			return Violation{
				Signal:    SignalEmptyDirFsLimit,
				Threshold: field.NewPath("spec", "volumes").Index(i).Child("emptyDir", "sizeLimit").String() + "=" + lim.String(),
				Used:      u,
				Message:   fmt.Sprintf(emptyDirMessageFmt, v.Name, lim.String()),
			}, true
		}
	}
	if lim, ok := qos.PodLimits(pod)[corev1.ResourceEphemeralStorage]; ok {
		if u := s.Ephemeral; exceeds(u, &lim) {
			return Violation{
				Signal:    SignalEphemeralPodFsLimit,
				Threshold: "sum of spec.containers[*].resources.limits[ephemeral-storage]=" + lim.String(),
				Used:      u,
				Message:   fmt.Sprintf(podEphemeralStorageMessageFmt, lim.String()),
			}, true
		}
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		lim := c.Resources.Limits.StorageEphemeral()
		u, measured := s.Containers[c.Name]
		if lim.IsZero() || !measured {
			continue
		}
		if exceeds(u, lim) {
			return Violation{
				Signal: SignalEphemeralContainerFsLimit,
				Threshold: field.NewPath("spec", "containers").Index(i).Child("resources", "limits").Key(string(corev1.ResourceEphemeralStorage)).String() +
					"=" + lim.String(),
				Used:    u,
				Message: fmt.Sprintf(containerEphemeralStorageMessageFmt, c.Name, lim.String()),
			}, true
		}
	}
	return Violation{}, false
}

// exceeds compares as the kubelet does, on quantities: used > limit.
func exceeds(used uint64, limit *resource.Quantity) bool {
	u := resource.NewQuantity(int64(min(used, uint64(1<<63-1))), resource.BinarySI)
	return u.Cmp(*limit) > 0
}
