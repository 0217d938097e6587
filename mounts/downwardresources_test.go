package mounts

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodeguard/nodeguard/lifecycle/podspec"
)

// TestDownwardAPIResourceFieldRef: a downwardAPI item's resourceFieldRef
// is its container's limit or request divided by the divisor, rounded up,
// and an unset limit the node's allocatable, as the kubelet writes them.
func TestDownwardAPIResourceFieldRef(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "client-container",
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("125m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")},
		},
	}}}}
	item := func(path, res, divisor string) corev1.DownwardAPIVolumeFile {
		fs := &corev1.ResourceFieldSelector{ContainerName: "client-container", Resource: res}
		if divisor != "" {
			fs.Divisor = resource.MustParse(divisor)
		}
		return corev1.DownwardAPIVolumeFile{Path: path, ResourceFieldRef: fs}
	}
	alloc := allocatable(nil, 8<<30)
	pl := payload{}
	err := addDownward(pl, pod, []corev1.DownwardAPIVolumeFile{
		item("cpu_limit", "limits.cpu", "1m"),
		item("cpu_request", "requests.cpu", "1m"),
		item("cpu_cores", "limits.cpu", ""),
		item("mem_request", "requests.memory", "1Mi"),
		item("mem_limit", "limits.memory", "1Mi"),
	}, 0o644, alloc)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{"cpu_limit": "250", "cpu_request": "125", "cpu_cores": "1", "mem_request": "32", "mem_limit": "8192"} {
		if got := string(pl[path].data); got != want {
			t.Errorf("%s = %q, want %q", path, got, want)
		}
	}
	err = addDownward(payload{}, pod, []corev1.DownwardAPIVolumeFile{item("storage", "limits.ephemeral-storage", "")}, 0o644, alloc)
	if !errors.Is(err, podspec.ErrAllocatableUnknown) {
		t.Errorf("an unset limit of an allocatable nobody knows: %v", err)
	}
	pod.Spec.Containers[0].Name = "renamed"
	if errs := validateDownward(pod, []corev1.DownwardAPIVolumeFile{item("cpu_limit", "limits.cpu", "1m")}, nil, newPathSet()); len(errs) != 1 ||
		errs[0].Error() != `[0].resourceFieldRef.containerName: Invalid value: "client-container": no container of the pod has this name` {
		t.Errorf("a reference to a container the pod lacks: %v", errs)
	}
}
