package lifecycle_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/lifecycle"
)

// refusedFirstPod's first container is refused at start (runAsNonRoot,
// and busybox runs as root), its second is fine: the kubelet starts the
// second all the same, each container's failure being its own.
const refusedFirstPod = `
apiVersion: v1
kind: Pod
metadata: {name: halfrefused, uid: halfrefused-uid}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: a
    image: BUSYBOX
    command: [sleep, "3600"]
    securityContext: {runAsNonRoot: true}
  - name: b
    image: BUSYBOX
    command: [sleep, "3600"]
`

func containerStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == name {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

func TestARefusedContainerDoesNotKeepTheOthersFromStarting(t *testing.T) {
	r := newRig(t)
	m, _ := r.manager(t)
	ctx := context.Background()
	if _, err := m.Apply(ctx, r.pods(t, refusedFirstPod), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, m, "halfrefused", "running b while a waits refused", func(p *corev1.Pod) bool {
		a, b := containerStatus(p, "a"), containerStatus(p, "b")
		return a != nil && b != nil && b.State.Running != nil &&
			a.State.Waiting != nil && a.State.Waiting.Reason == lifecycle.ReasonCreateContainerConfigError
	})
	want := `container has runAsNonRoot and image will run as root (pod: "halfrefused_default(halfrefused-uid)", container: a)`
	if w := containerStatus(p, "a").State.Waiting; !strings.Contains(w.Message, want) {
		t.Errorf("a's waiting message %q, want the kubelet's %q", w.Message, want)
	}
	// As the kubelet's getPhase: a container that never ran keeps the
	// pod Pending, whatever the others do.
	if p.Status.Phase != corev1.PodPending {
		t.Errorf("phase %s, want Pending (a never ran)", p.Status.Phase)
	}
	if p.Status.Reason != lifecycle.ReasonCreateContainerConfigError {
		t.Errorf("pod reason %q, want a's %s", p.Status.Reason, lifecycle.ReasonCreateContainerConfigError)
	}
	if err := m.Delete(ctx, "default", "halfrefused"); err != nil {
		t.Fatal(err)
	}
	waitGone(t, m, "halfrefused")
}
