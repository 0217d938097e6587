package podspec

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// ErrAllocatableUnknown: a resourceFieldRef names a limit the container
// does not set, and the node's allocatable of that resource is unknown.
var ErrAllocatableUnknown = errors.New("the node's allocatable is unknown")

// ResourceFieldValue is the value of a resourceFieldRef, env's or a
// downwardAPI volume's, as the kubelet's containerResourceRuntimeValue over
// a pod defaulted by defaultPodLimitsForDownwardAPI: the named container
// (c when no name is given, as env allows), its limit or request divided
// by the divisor (1 when unset) and rounded up; an unset limit is the
// node's allocatable.
func ResourceFieldValue(pod *corev1.Pod, c *corev1.Container, fs *corev1.ResourceFieldSelector, allocatable corev1.ResourceList) (string, error) {
	target := c
	if fs.ContainerName != "" {
		target = nil
		for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
			for i := range cs {
				if cs[i].Name == fs.ContainerName {
					target = &cs[i]
				}
			}
		}
	}
	if target == nil {
		return "", fmt.Errorf("container %s not found", fs.ContainerName)
	}
	divisor := fs.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	kind, name, ok := strings.Cut(fs.Resource, ".")
	res := corev1.ResourceName(name)
	if !ok || (kind != "limits" && kind != "requests") ||
		(res != corev1.ResourceCPU && res != corev1.ResourceMemory && res != corev1.ResourceEphemeralStorage) {
		return "", fmt.Errorf("unsupported container resource : %v", fs.Resource)
	}
	list := target.Resources.Requests
	if kind == "limits" {
		list = target.Resources.Limits
	}
	q, set := list[res]
	if !set && kind == "limits" {
		if q, set = allocatable[res]; !set {
			return "", fmt.Errorf("%s: %w (%s)", fs.Resource, ErrAllocatableUnknown, res)
		}
	}
	if res == corev1.ResourceCPU {
		return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(divisor.MilliValue()))), 10), nil
	}
	return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(divisor.Value()))), 10), nil
}
