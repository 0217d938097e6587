package lifecycle_test

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// syncCalls counts, for one pod, the CRI calls of each of its syncs (a
// sync starts with its worker's ListPodSandbox of the pod's UID; the
// pod's worker is serial, so the calls until the next one are that
// sync's) and the exec probes made in its containers.
type syncCalls struct {
	lifecycle.Runtime
	uid types.UID

	mu    sync.Mutex
	syncs []int // ContainerStatus calls of each sync
	execs int
}

func (s *syncCalls) ListPodSandbox(ctx context.Context, labels map[string]string) ([]*runtimeapi.PodSandbox, error) {
	if labels[cri.PodUIDLabel] == string(s.uid) {
		s.mu.Lock()
		s.syncs = append(s.syncs, 0)
		s.mu.Unlock()
	}
	return s.Runtime.ListPodSandbox(ctx, labels)
}

func (s *syncCalls) ContainerStatus(ctx context.Context, id string) (*runtimeapi.ContainerStatus, error) {
	st, err := s.Runtime.ContainerStatus(ctx, id)
	if err == nil && st.GetLabels()[cri.PodUIDLabel] == string(s.uid) {
		s.mu.Lock()
		if n := len(s.syncs); n > 0 {
			s.syncs[n-1]++
		}
		s.mu.Unlock()
	}
	return st, err
}

func (s *syncCalls) ExecSync(ctx context.Context, id string, cmd []string, timeout time.Duration) (cri.ExecResult, error) {
	s.mu.Lock()
	s.execs++
	s.mu.Unlock()
	return s.Runtime.ExecSync(ctx, id, cmd, timeout)
}

// since returns the syncs begun after the first `from` ones, all but the
// last (which may still be running), and the exec probes made so far.
func (s *syncCalls) since(from int) (done []int, execs int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.syncs) > from+1 {
		done = append(done, s.syncs[from:len(s.syncs)-1]...)
	}
	return done, s.execs
}

const steadyProbedPod = `
apiVersion: v1
kind: Pod
metadata: {name: steady, uid: steady-uid}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: a
    image: BUSYBOX
    command: [sleep, "3600"]
    readinessProbe: {exec: {command: ["true"]}, periodSeconds: 1}
    livenessProbe: {exec: {command: ["true"]}, periodSeconds: 1}
  - name: b
    image: BUSYBOX
    command: [sleep, "3600"]
`

// TestASteadyPodsSyncAsksEachContainerOnceAndProbesDoNotWakeIt: once a
// pod runs and is ready, each of its syncs asks the runtime for each
// container's status once (the status reuses what the sync just read of
// a container nothing happened to), and probes whose results do not
// change wake no sync, as in the kubelet, where only a changed result
// reaches the pod's worker: the pod is synced at its steady resync, not
// once a probe.
func TestASteadyPodsSyncAsksEachContainerOnceAndProbesDoNotWakeIt(t *testing.T) {
	r := newRig(t)
	r.logInterval = time.Hour // the log rotator's statuses are not the syncs'
	calls := &syncCalls{uid: "steady-uid"}
	r.runtime = func(rt lifecycle.Runtime) lifecycle.Runtime { calls.Runtime = rt; return calls }
	m, _ := r.manager(t)
	ctx := context.Background()
	if _, err := m.Apply(ctx, r.pods(t, steadyProbedPod), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	waitPod(t, m, "steady", "running and ready", func(p *corev1.Pod) bool { return running(p) && ready(p) })
	from, execs0 := calls.since(0)
	start := len(from) + 1
	// Three whole steady syncs (every SteadyResync: 3 s
	// here), bounded.
	var syncs []int
	execs := execs0
	deadline := time.Now().Add(30 * time.Second)
	for len(syncs) < 3 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		syncs, execs = calls.since(start)
	}
	if len(syncs) < 3 {
		t.Fatalf("%d syncs of the steady pod seen in 30 s, want 3", len(syncs))
	}
	for i, n := range syncs {
		if n != 2 {
			t.Errorf("steady sync %d asked for %d container statuses, want 2 (one a container); all: %v", i+1, n, syncs)
		}
	}
	probes := execs - execs0
	t.Logf("%d syncs while %d exec probes ran; container statuses a sync: %v", len(syncs), probes, syncs)
	// Two probes a second against a sync every 3 s: were each probe to
	// wake a sync, there would be more syncs than probes.
	if probes < 2*len(syncs) {
		t.Errorf("%d probes ran during %d syncs: want a sync every several probes, not one a probe", probes, len(syncs))
	}
	if err := m.Delete(ctx, "default", "steady"); err != nil {
		t.Fatal(err)
	}
	waitGone(t, m, "steady")
}
