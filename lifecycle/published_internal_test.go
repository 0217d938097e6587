package lifecycle

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestPublished(t *testing.T) {
	yes := true
	status := func(podReady corev1.ConditionStatus, cs ...corev1.ContainerStatus) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: podReady}},
			ContainerStatuses: cs,
		}}
	}
	ready := corev1.ContainerStatus{Name: "a", ContainerID: "containerd://c1", Ready: true, Started: &yes}
	for _, c := range []struct {
		name                 string
		pod                  *corev1.Pod
		ctr, id              string
		wantReady, wantStart bool
	}{
		{name: "the same container, ready in a Ready pod", pod: status(corev1.ConditionTrue, ready), ctr: "a", id: "c1", wantReady: true, wantStart: true},
		{name: "a replaced container starts over", pod: status(corev1.ConditionTrue, ready), ctr: "a", id: "c2"},
		{name: "another container's status is not this one's", pod: status(corev1.ConditionTrue, ready), ctr: "b", id: "c1"},
		{name: "the pod's Ready condition False (the node controller's, a node that stopped reporting) carries no readiness, the start only",
			pod: status(corev1.ConditionFalse, ready), ctr: "a", id: "c1", wantStart: true},
		{name: "no started field is no start",
			pod: status(corev1.ConditionTrue, corev1.ContainerStatus{Name: "a", ContainerID: "containerd://c1", Ready: true}), ctr: "a", id: "c1", wantReady: true},
		{name: "a sidecar's status among the init containers",
			pod: &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
				InitContainerStatuses: []corev1.ContainerStatus{{Name: "side", ContainerID: "containerd://s1", Ready: true, Started: &yes}}}},
			ctr: "side", id: "s1", wantReady: true, wantStart: true},
		{name: "no status at all", pod: &corev1.Pod{}, ctr: "a", id: "c1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, s := published(c.pod, c.ctr, c.id)
			if r != c.wantReady || s != c.wantStart {
				t.Errorf("published = ready %v, started %v; want %v, %v", r, s, c.wantReady, c.wantStart)
			}
		})
	}
}
