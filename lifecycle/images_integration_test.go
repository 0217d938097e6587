package lifecycle_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/lifecycle"
)

// TestImagePullPolicyAgainstARealContainerd: on a node that does not pull,
// a missing image is ErrImageNeverPull under Never and ErrImagePull under
// IfNotPresent, in the container's waiting state and the pod's reason, and
// a present image runs under Never.
func TestImagePullPolicyAgainstARealContainerd(t *testing.T) {
	r := newRig(t)
	m, _ := r.manager(t)
	const pods = `
apiVersion: v1
kind: Pod
metadata: {name: never-missing}
spec:
  containers: [{name: app, image: registry.local/nodeguard/absent:1, imagePullPolicy: Never, command: [sh]}]
---
apiVersion: v1
kind: Pod
metadata: {name: ifnotpresent-missing}
spec:
  containers: [{name: app, image: registry.local/nodeguard/absent:1, imagePullPolicy: IfNotPresent, command: [sh]}]
---
apiVersion: v1
kind: Pod
metadata: {name: never-present}
spec:
  terminationGracePeriodSeconds: 1
  containers: [{name: app, image: BUSYBOX, imagePullPolicy: Never, command: [sleep, "3600"]}]
`
	if _, err := m.Apply(context.Background(), r.pods(t, pods), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	waiting := func(reason string) func(*corev1.Pod) bool {
		return func(p *corev1.Pod) bool {
			return p.Status.Reason == reason && len(p.Status.ContainerStatuses) == 1 &&
				p.Status.ContainerStatuses[0].State.Waiting != nil && p.Status.ContainerStatuses[0].State.Waiting.Reason == reason
		}
	}
	p := waitPod(t, m, "never-missing", "waited with ErrImageNeverPull", waiting(lifecycle.ReasonErrImageNeverPull))
	if msg := p.Status.ContainerStatuses[0].State.Waiting.Message; !strings.Contains(msg, `container image "registry.local/nodeguard/absent:1" is not present with pull policy of Never`) {
		t.Errorf("ErrImageNeverPull message %q does not say what the kubelet says", msg)
	}
	p = waitPod(t, m, "ifnotpresent-missing", "waited with ErrImagePull", waiting(lifecycle.ReasonErrImagePull))
	if msg := p.Status.ContainerStatuses[0].State.Waiting.Message; !strings.Contains(msg, "imagePull: false") {
		t.Errorf("ErrImagePull message %q does not name the imagePull config key", msg)
	}
	if p.Status.Phase != corev1.PodPending {
		t.Errorf("phase %s, want Pending", p.Status.Phase)
	}
	waitPod(t, m, "never-present", "ran", running)

	// Always is refused at admission on this node, which does not pull.
	_, err := m.Apply(context.Background(), r.pods(t, `
apiVersion: v1
kind: Pod
metadata: {name: always}
spec:
  containers: [{name: app, image: BUSYBOX, imagePullPolicy: Always, command: [sh]}]
`), lifecycle.SourceAPI)
	if !errors.Is(err, lifecycle.ErrInvalid) || !strings.Contains(err.Error(), "spec.containers[0].imagePullPolicy") || !strings.Contains(err.Error(), "imagePull: false") {
		t.Errorf("Apply of an Always pod: %v, want ErrInvalid naming the field and the config key", err)
	}
}
