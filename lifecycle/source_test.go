package lifecycle

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The eviction policy spares static pods, as the kubelet does: only the
// manifest directory's are, not the API server's (node mode) nor the
// local API's.
func TestOnlyManifestPodsAreStatic(t *testing.T) {
	for source, want := range map[string]bool{"file:/etc/nodeguard/manifests/web.yaml": true, SourceAPI: false, SourceAPIServer: false} {
		if got := staticSource(source); got != want {
			t.Errorf("staticSource(%q) = %v, want %v", source, got, want)
		}
	}
}

// An evicted pod whose stopped containers could not be read still ends
// with no container running nor ready.
func TestUnknownStoppedLeavesNothingRunning(t *testing.T) {
	st := corev1.PodStatus{
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}, {Type: corev1.ContainersReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{
			{Name: "a", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
			{Name: "b", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 143, Reason: "Error"}}},
		},
	}
	unknownStopped(&st)
	if a := st.ContainerStatuses[0]; a.Ready || a.State.Terminated == nil || a.State.Terminated.Reason != "ContainerStatusUnknown" {
		t.Errorf("running container after unknownStopped: %+v", a)
	}
	if b := st.ContainerStatuses[1].State.Terminated; b.ExitCode != 143 {
		t.Errorf("a container seen stopped lost its exit code: %+v", b)
	}
	for _, c := range st.Conditions {
		if c.Status != corev1.ConditionFalse {
			t.Errorf("%s %s", c.Type, c.Status)
		}
	}
}
