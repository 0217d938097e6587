package localstorage

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestCheck(t *testing.T) {
	q := resource.MustParse
	limit := func(v string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceEphemeralStorage: q(v)}}
	}
	size := q("1Mi")
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		Volumes: []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &size}}}},
		Containers: []corev1.Container{
			{Name: "a", Resources: limit("2Mi")},
			{Name: "b", Resources: limit("2Mi")},
		},
	}}
	for _, c := range []struct {
		name       string
		usage      Usage
		wantSignal string
		wantUsed   uint64
	}{
		{name: "within every limit", usage: Usage{EmptyDirs: map[string]uint64{"scratch": 1 << 20}, Ephemeral: 3 << 20, Containers: map[string]uint64{"a": 1 << 20}}},
		{name: "the emptyDir first, in the kubelet's order", wantSignal: SignalEmptyDirFsLimit, wantUsed: 1<<20 + 1,
			usage: Usage{EmptyDirs: map[string]uint64{"scratch": 1<<20 + 1}, Ephemeral: 5 << 20, Containers: map[string]uint64{"a": 3 << 20}}},
		{name: "the pod's total against the sum of its containers' limits", wantSignal: SignalEphemeralPodFsLimit, wantUsed: 4<<20 + 1,
			usage: Usage{Ephemeral: 4<<20 + 1}},
		{name: "one container past its own limit", wantSignal: SignalEphemeralContainerFsLimit, wantUsed: 2<<20 + 1,
			usage: Usage{Ephemeral: 3 << 20, Containers: map[string]uint64{"b": 2<<20 + 1}}},
		{name: "an unmeasured emptyDir or container is never in violation", usage: Usage{Ephemeral: 1 << 20}},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, over := Check(pod, c.usage)
			if over != (c.wantSignal != "") || v.Signal != c.wantSignal || v.Used != c.wantUsed {
				t.Fatalf("Check = %+v, %v; want signal %q used %d", v, over, c.wantSignal, c.wantUsed)
			}
			if over && (v.Threshold == "" || v.Message == "") {
				t.Errorf("violation without its threshold or message: %+v", v)
			}
		})
	}
}
