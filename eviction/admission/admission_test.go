package admission

import (
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/eviction"
)

// TestTolerableMemoryPressure: as the kubelet's eviction admission, a pod
// that tolerates the memory-pressure taint is admitted under
// MemoryPressure alone, never under disk or PID pressure.
func TestTolerableMemoryPressure(t *testing.T) {
	tolerating := &corev1.Pod{Spec: corev1.PodSpec{Tolerations: []corev1.Toleration{
		{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}}}
	everything := &corev1.Pod{Spec: corev1.PodSpec{Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}}
	other := &corev1.Pod{Spec: corev1.PodSpec{Tolerations: []corev1.Toleration{
		{Key: corev1.TaintNodeDiskPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}}}
	mem := map[eviction.Condition]bool{eviction.MemoryPressure: true}
	memDisk := map[eviction.Condition]bool{eviction.MemoryPressure: true, eviction.DiskPressure: true}
	tests := []struct {
		name  string
		conds map[eviction.Condition]bool
		pod   *corev1.Pod
		want  bool
	}{
		{"a pod tolerating memory pressure, under memory pressure", mem, tolerating, true},
		{"a pod tolerating every taint, under memory pressure", mem, everything, true},
		{"a pod tolerating another taint, under memory pressure", mem, other, false},
		{"a pod with no toleration, under memory pressure", mem, &corev1.Pod{}, false},
		{"a pod tolerating memory pressure, under memory and disk pressure", memDisk, tolerating, false},
		{"a pod tolerating memory pressure, with no pressure (Admit decides)", map[eviction.Condition]bool{}, tolerating, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := TolerableMemoryPressure(tt.conds, tt.pod); got != tt.want {
				t.Errorf("TolerableMemoryPressure = %v, want %v", got, tt.want)
			}
		})
	}
}

func requesting(uid, cpu, mem string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID("u-" + uid)}}
	req := corev1.ResourceList{}
	if cpu != "" {
		req[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		req[corev1.ResourceMemory] = resource.MustParse(mem)
	}
	p.Spec.Containers = []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: req}}}
	return p
}

// TestFit: the pod's requests, with those of the pods there that are not
// terminal, must fit the allocatable; the refusal says so in the
// kubelet's reason and message.
func TestFit(t *testing.T) {
	alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi"),
		corev1.ResourcePods: resource.MustParse("2")}
	done := requesting("done", "2", "1Gi")
	done.Status.Phase = corev1.PodSucceeded
	tests := []struct {
		name        string
		pod         *corev1.Pod
		active      []*corev1.Pod
		wantReason  string
		wantMessage string
	}{
		{"a pod that fits an empty node is admitted", requesting("a", "1", "512Mi"), nil, "", ""},
		{"a pod that fits beside a terminal pod is admitted", requesting("a", "2", "1Gi"), []*corev1.Pod{done}, "", ""},
		{"a pod is not counted against itself", requesting("a", "2", "1Gi"), []*corev1.Pod{requesting("a", "2", "1Gi")}, "", ""},
		{"cpu beyond the allocatable is OutOfcpu, in millicores", requesting("a", "1500m", ""), []*corev1.Pod{requesting("b", "1", "")},
			"OutOfcpu", "Node didn't have enough resource: cpu, requested: 1500, used: 1000, capacity: 2000"},
		{"memory beyond the allocatable is OutOfmemory", requesting("a", "", "768Mi"), []*corev1.Pod{requesting("b", "", "512Mi")},
			"OutOfmemory", "Node didn't have enough resource: memory, requested: 805306368, used: 536870912, capacity: 1073741824"},
		{"a pod beyond maxPods is OutOfpods", requesting("a", "", ""), []*corev1.Pod{requesting("b", "", ""), requesting("c", "", "")},
			"OutOfpods", "Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Fit(tt.pod, tt.active, alloc)
			if tt.wantReason == "" {
				if err != nil {
					t.Fatalf("Fit = %v, want admitted", err)
				}
				return
			}
			reason, msg, ok := Reason(err)
			if !ok || reason != tt.wantReason || msg != tt.wantMessage {
				t.Errorf("Reason(%v) = %q, %q, %v; want %q, %q", err, reason, msg, ok, tt.wantReason, tt.wantMessage)
			}
		})
	}
}

// TestReason: a pressure refusal is the kubelet's Evicted with its
// message, wrapped or not; any other error is left to the caller.
func TestReason(t *testing.T) {
	pressure := &eviction.AdmitError{Conditions: []eviction.Condition{eviction.MemoryPressure}}
	for _, err := range []error{pressure, fmt.Errorf("admit: %w", pressure)} {
		reason, msg, ok := Reason(err)
		if !ok || reason != "Evicted" || msg != "The node had condition: [MemoryPressure]." {
			t.Errorf("Reason(%v) = %q, %q, %v", err, reason, msg, ok)
		}
	}
	if reason, msg, ok := Reason(errors.New("other")); ok {
		t.Errorf("Reason(other) = %q, %q, true; want it left to the caller", reason, msg)
	}
}
