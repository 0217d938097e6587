package lifecycle_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

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

// unknownOnce is a runtime that reports one container (the first it is
// asked about whose name is name) as CONTAINER_UNKNOWN, as containerd does
// for a container whose task it could not load when it restarted, until
// that container is stopped. The container itself runs on underneath: what
// an unknown state may hide.
type unknownOnce struct {
	lifecycle.Runtime
	name string

	mu      sync.Mutex
	id      string // the container reported unknown
	stopped bool
}

func (u *unknownOnce) ContainerStatus(ctx context.Context, id string) (*runtimeapi.ContainerStatus, error) {
	s, err := u.Runtime.ContainerStatus(ctx, id)
	if err != nil || s.GetMetadata().GetName() != u.name {
		return s, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.id == "" && s.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING {
		u.id = id
	}
	if id == u.id && !u.stopped {
		s.State = runtimeapi.ContainerState_CONTAINER_UNKNOWN
	}
	return s, nil
}

func (u *unknownOnce) StopContainer(ctx context.Context, id string, timeout time.Duration) error {
	err := u.Runtime.StopContainer(ctx, id, timeout)
	u.mu.Lock()
	if id == u.id && err == nil {
		u.stopped = true
	}
	u.mu.Unlock()
	return err
}

func (u *unknownOnce) unknown() (string, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.id, u.stopped
}

// TestAContainerInAnUnknownStateIsReplaced: a container the runtime
// reports in an unknown state (containerd after a restart that could not
// load its task; CI once saw a pod wait as ContainerCreating for 3 minutes
// on it) is stopped and its next attempt started, as the kubelet does,
// for an app container and for a sidecar, and the stopped one is gone:
// never two instances at once.
func TestAContainerInAnUnknownStateIsReplaced(t *testing.T) {
	for _, tc := range []struct{ name, spec string }{
		{"app container", `
apiVersion: v1
kind: Pod
metadata: {name: lost}
spec:
  terminationGracePeriodSeconds: 2
  restartPolicy: Never
  containers:
  - {name: c, image: BUSYBOX, command: [sleep, "3600"]}
`},
		{"sidecar", `
apiVersion: v1
kind: Pod
metadata: {name: lost}
spec:
  terminationGracePeriodSeconds: 2
  initContainers:
  - {name: c, image: BUSYBOX, restartPolicy: Always, command: [sleep, "3600"]}
  containers:
  - {name: app, image: BUSYBOX, command: [sleep, "3600"]}
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			var u *unknownOnce
			r.runtime = func(rt lifecycle.Runtime) lifecycle.Runtime { u = &unknownOnce{Runtime: rt, name: "c"}; return u }
			m, _ := r.manager(t)
			if _, err := m.Apply(context.Background(), r.pods(t, tc.spec), lifecycle.SourceAPI); err != nil {
				t.Fatal(err)
			}
			p := waitPod(t, m, "lost", "ran its next attempt of c", func(p *corev1.Pod) bool {
				for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
					if cs.Name == "c" && cs.State.Running != nil && cs.RestartCount == 1 {
						return running(p)
					}
				}
				return false
			})
			old, stopped := u.unknown()
			if old == "" || !stopped {
				t.Fatalf("the unknown container %q was not stopped (stopped %v); status %+v", old, stopped, p.Status)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ctrs, err := r.client.ListContainers(ctx, "", map[string]string{"io.kubernetes.pod.uid": string(p.UID)})
			if err != nil {
				t.Fatal(err)
			}
			var cs []string
			for _, c := range ctrs {
				if c.GetMetadata().GetName() == "c" {
					cs = append(cs, fmt.Sprintf("%s attempt %d %v", c.Id[:12], c.GetMetadata().GetAttempt(), c.State))
					if c.Id == old {
						t.Errorf("the container in an unknown state is still there: %v", cs)
					}
				}
			}
			if len(cs) != 1 {
				t.Errorf("containers named c: %v, want the next attempt alone", cs)
			}
			t.Logf("replaced %s: %v", old[:12], cs)
		})
	}
}

// A sandbox whose pause process dies under running containers is
// replaced at the next relist, as the kubelet's PLEG sees it, not at the
// pod's next steady resync: with the production Resync and SteadyResync
// (1 s and 1 min) that one is a minute or more away, and the relist alone
// can notice within the wait.
func TestASandboxThatStopsUnderRunningContainersIsReplaced(t *testing.T) {
	r := newRig(t)
	r.resync, r.steadyResync = lifecycle.DefaultResync, lifecycle.DefaultSteadyResync
	m, _ := r.manager(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := m.Apply(ctx, r.pods(t, `
apiVersion: v1
kind: Pod
metadata: {name: pauseless}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: c, image: BUSYBOX, command: [sleep, "3600"]}
`), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, m, "pauseless", "running", running)
	sandboxes := func() []*runtimeapi.PodSandbox {
		t.Helper()
		sbs, err := r.client.ListPodSandbox(ctx, map[string]string{"io.kubernetes.pod.uid": string(p.UID)})
		if err != nil {
			t.Fatal(err)
		}
		return sbs
	}
	sbs := sandboxes()
	if len(sbs) != 1 {
		t.Fatalf("sandboxes %v, want one", sbs)
	}
	old := sbs[0].Id
	resp, err := r.env.RuntimeClient().PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: old, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(resp.GetInfo()["info"]), &info); err != nil || info.Pid <= 0 {
		t.Fatalf("no pause pid in the sandbox's status (%v)", err)
	}
	// Wait for the pod's first steady sync to be behind us: the next is
	// 60 to 90 s away.
	time.Sleep(2 * time.Second)
	if err := syscall.Kill(info.Pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the pause process %d: %v", info.Pid, err)
	}
	killed := time.Now()
	deadline := killed.Add(30 * time.Second)
	for {
		var ready []string
		for _, sb := range sandboxes() {
			if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY && sb.Id != old {
				ready = append(ready, sb.Id)
			}
		}
		if len(ready) == 1 {
			t.Logf("pause process killed: a new sandbox %s ready %v later", ready[0][:12], time.Since(killed).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new sandbox 30 s after the pause process was killed (steady resyncs are 60 s apart): %v", sandboxes())
		}
		time.Sleep(200 * time.Millisecond)
	}
	waitPod(t, m, "pauseless", "running again", func(p *corev1.Pod) bool {
		cs := containerStatus(p, "c")
		return running(p) && cs != nil && cs.State.Running != nil
	})
	if err := m.Delete(ctx, "default", "pauseless"); err != nil {
		t.Fatal(err)
	}
	waitGone(t, m, "pauseless")
}
