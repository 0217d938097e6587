package lifecycle_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/lifecycle"
)

// heldStops is a runtime whose StopContainer waits out a grace period
// that ends only when the test says so, as the runtime's StopContainer
// waits for a container that ignores SIGTERM: each call is reported on
// entered as it starts to wait; once release is closed the grace is over
// and the container is stopped at once (timeout 0).
type heldStops struct {
	lifecycle.Runtime
	entered chan string
	release chan struct{}
	once    sync.Once

	mu    sync.Mutex
	calls map[string]int // StopContainer calls per container
}

func holdStops(rt lifecycle.Runtime) *heldStops {
	return &heldStops{Runtime: rt, entered: make(chan string, 64), release: make(chan struct{}), calls: map[string]int{}}
}

func (h *heldStops) StopContainer(ctx context.Context, id string, timeout time.Duration) error {
	h.mu.Lock()
	h.calls[id]++
	h.mu.Unlock()
	select {
	case h.entered <- id:
	default:
	}
	select {
	case <-h.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return h.Runtime.StopContainer(ctx, id, 0)
}

// let ends the grace periods, of the held calls and of those to come.
func (h *heldStops) let() { h.once.Do(func() { close(h.release) }) }

func (h *heldStops) callsOf(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[id]
}

// waitEntered waits for n StopContainer calls to be held and returns their
// container ids.
func (h *heldStops) waitEntered(t *testing.T, n int) []string {
	t.Helper()
	var ids []string
	timeout := time.After(30 * time.Second)
	for len(ids) < n {
		select {
		case id := <-h.entered:
			ids = append(ids, id)
		case <-timeout:
			t.Fatalf("%d of %d StopContainer calls came", len(ids), n)
		}
	}
	return ids
}

// stoppingPod ignores SIGTERM, so that its StopContainer waits for the
// whole grace period.
const stoppingPod = `
apiVersion: v1
kind: Pod
metadata: {name: NAME}
spec:
  terminationGracePeriodSeconds: 30
  containers:
  - {name: main, image: BUSYBOX, command: [sh, -c, "trap '' TERM; sleep 3600"]}
`

func (r *rig) stoppingPod(t *testing.T, name string) []*corev1.Pod {
	return r.pods(t, strings.ReplaceAll(stoppingPod, "NAME", name))
}

// Config.Workers bounds the pods talking to the runtime at once; a pod
// waiting out its containers' grace period is not talking, and must not
// keep a new pod from starting (it did: Workers deletions in grace held
// every slot for the whole grace period).
func TestPodsInTheirGracePeriodDoNotHoldBackANewPod(t *testing.T) {
	r := newRig(t)
	r.workers = 2
	var held *heldStops
	r.runtime = func(rt lifecycle.Runtime) lifecycle.Runtime { held = holdStops(rt); return held }
	m, _ := r.manager(t)
	t.Cleanup(held.let) // before the manager stops
	ctx := context.Background()

	var leaving []string
	for i := range r.workers {
		name := fmt.Sprintf("leaving-%d", i)
		leaving = append(leaving, name)
		if _, err := m.Apply(ctx, r.stoppingPod(t, name), lifecycle.SourceAPI); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range leaving {
		waitPod(t, m, name, "ran", running)
	}
	for _, name := range leaving {
		if err := m.Delete(ctx, "default", name); err != nil {
			t.Fatal(err)
		}
	}
	held.waitEntered(t, len(leaving))

	if _, err := m.Apply(ctx, r.stoppingPod(t, "arriving"), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	waitPod(t, m, "arriving", fmt.Sprintf("ran while %d pods (Workers) were in their grace period", len(leaving)), running)

	held.let()
	for _, name := range leaving {
		waitGone(t, m, name)
	}
}

// The Run loop hands the teardown of a sandbox nobody wants to a worker:
// while its containers' grace period runs, the loop keeps passing (the
// relist, the watchdog's heartbeat, new pods' workers), and a sandbox seen
// again by later passes is not torn down twice.
func TestTheRunLoopKeepsPassingWhileAnOrphanIsTornDown(t *testing.T) {
	r := newRig(t)
	m1, stop1 := r.manager(t)
	ctx := context.Background()
	if _, err := m1.Apply(ctx, r.stoppingPod(t, "orphan"), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, m1, "orphan", "ran", running)
	ctr := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
	// nodeguard stops and comes back without the pod: its sandbox is an
	// orphan.
	stop1()
	if err := os.RemoveAll(filepath.Join(r.root, lifecycle.DefaultStateSubdir, lifecycle.KindAPIPod.Name)); err != nil {
		t.Fatal(err)
	}

	var held *heldStops
	r.runtime = func(rt lifecycle.Runtime) lifecycle.Runtime { held = holdStops(rt); return held }
	m2, _ := r.manager(t)
	t.Cleanup(held.let)
	if got := held.waitEntered(t, 1); got[0] != ctr {
		t.Fatalf("StopContainer of %s, want the orphan's container %s", got[0], ctr)
	}

	// Three passes of the loop while the orphan's stop is held: each
	// relists and sees the orphan's container again, and none starts a
	// second teardown of it.
	beats := map[time.Time]bool{m2.Heartbeat(): true}
	deadline := time.Now().Add(30 * time.Second)
	for len(beats) < 4 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		beats[m2.Heartbeat()] = true
	}
	if len(beats) < 4 {
		t.Fatalf("the Run loop passed %d times in 30 s while an orphan's StopContainer was held, want at least 3 (heartbeat %v)", len(beats)-1, m2.Heartbeat())
	}
	if n := held.callsOf(ctr); n != 1 {
		t.Errorf("the orphan's container got %d StopContainer calls while its teardown ran, want 1", n)
	}

	held.let()
	deadline = time.Now().Add(30 * time.Second)
	for r.sandboxes(t) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the orphan's sandbox is still there 30 s after its stop was let go")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
