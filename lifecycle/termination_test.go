package lifecycle_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

const terminationPod = `
apiVersion: v1
kind: Pod
metadata: {name: termination}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: fallback
    image: BUSYBOX
    terminationMessagePolicy: FallbackToLogsOnError
    # One stream: the runtime copies stdout and stderr apart, so their
    # order in the log is not the order they were written in.
    command: [sh, -c, 'echo starting >&2; echo "cannot open /etc/app.conf" >&2; exit 3']
  - name: file
    image: BUSYBOX
    command: [sh, -c, 'echo this is not a message; exit 4']
  - name: succeeded
    image: BUSYBOX
    terminationMessagePolicy: FallbackToLogsOnError
    command: [sh, -c, 'echo done']
`

// TestFallbackToLogsOnErrorAgainstARealContainerd: a container that fails
// with terminationMessagePolicy FallbackToLogsOnError has the end of its
// log as its terminated state's message, as the kubelet gives it; one with
// the default policy (File) or one that succeeded has none.
func TestFallbackToLogsOnErrorAgainstARealContainerd(t *testing.T) {
	r := newRig(t)
	m, _ := r.manager(t)
	if _, err := m.Apply(t.Context(), r.pods(t, terminationPod), "test"); err != nil {
		t.Fatal(err)
	}
	removeAtEnd(t, m, "termination")
	p := waitPod(t, m, "termination", "failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	want := map[string]string{"fallback": "starting\ncannot open /etc/app.conf\n", "file": "", "succeeded": ""}
	for _, cs := range p.Status.ContainerStatuses {
		term := cs.State.Terminated
		if term == nil {
			t.Errorf("%s: not terminated: %+v", cs.Name, cs.State)
			continue
		}
		if term.Message != want[cs.Name] {
			t.Errorf("%s: message %q, want %q", cs.Name, term.Message, want[cs.Name])
		}
	}
}
