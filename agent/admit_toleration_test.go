package agent

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

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
			if got := tolerableMemoryPressure(tt.conds, tt.pod); got != tt.want {
				t.Errorf("tolerableMemoryPressure = %v, want %v", got, tt.want)
			}
		})
	}
}
