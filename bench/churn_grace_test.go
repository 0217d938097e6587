package bench

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// graceRunner runs every pod at once; a deleted pod of the first batch
// stays in its grace period until every pod of the second batch was
// applied, one of the second batch is gone at once.
type graceRunner struct {
	pods int

	mu       sync.Mutex
	running  map[string]*corev1.Pod
	deleted  map[string]bool
	applied  int // of the second batch
	graceEnd chan struct{}
	bad      []string // pods that would not wait out a grace period
}

func newGraceRunner(pods int) *graceRunner {
	return &graceRunner{pods: pods, running: map[string]*corev1.Pod{}, deleted: map[string]bool{}, graceEnd: make(chan struct{})}
}

func (g *graceRunner) Apply(_ context.Context, pods []*corev1.Pod, _ string) ([]*corev1.Pod, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range pods {
		if s := p.Spec.TerminationGracePeriodSeconds; s == nil || *s != 30 || !strings.Contains(strings.Join(p.Spec.Containers[0].Command, " "), "trap '' TERM") {
			g.bad = append(g.bad, p.Name)
		}
		g.running[p.Name] = p
		if strings.HasPrefix(p.Name, "grace-during-") {
			if g.applied++; g.applied == g.pods {
				close(g.graceEnd)
			}
		}
	}
	return pods, nil
}

func (g *graceRunner) Delete(_ context.Context, _, name string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.running[name]; !ok {
		return errors.New("no pod " + name)
	}
	g.deleted[name] = true
	return nil
}

// Get finds a pod until it was deleted and, for the first batch, its grace
// period ended.
func (g *graceRunner) Get(_, name string) (*corev1.Pod, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	p, ok := g.running[name]
	if !ok || !g.deleted[name] {
		return p, ok
	}
	if strings.HasPrefix(name, "grace-quiet-") {
		select {
		case <-g.graceEnd:
		default:
			return p, true
		}
	}
	delete(g.running, name)
	return nil, false
}

// Wait is for Running, which every pod is once applied.
func (g *graceRunner) Wait(_ context.Context, _, name string, pred func(*corev1.Pod, bool) bool) error {
	p, ok := g.Get("bench", name)
	if !ok {
		return errors.New("no pod " + name)
	}
	running := p.DeepCopy()
	running.Status.Phase = corev1.PodRunning
	if !pred(running, true) {
		return errors.New("pred does not want a running pod")
	}
	return nil
}

func TestRunChurnGrace(t *testing.T) {
	t.Run("pods started while the first batch waits out its grace period are counted as such", func(t *testing.T) {
		const pods = 12
		g := newGraceRunner(pods)
		rows, err := RunChurnGrace(context.Background(), g, ChurnConfig{Pods: pods, Parallel: 4, Grace: 30 * time.Second, Image: "busybox"})
		if err != nil {
			t.Fatal(err)
		}
		if len(g.bad) > 0 {
			t.Errorf("pods without a 30 s grace their container waits out: %v", g.bad)
		}
		if len(rows) != 3 {
			t.Fatalf("%d rows, want the empty node, the floor and the starts during deletions", len(rows))
		}
		quiet, dense, during := rows[0], rows[1], rows[2]
		if quiet.Startup.N != pods || quiet.Deletion.N != pods || quiet.InFlight != 0 {
			t.Errorf("empty node: %d starts, %d deletions, %d in grace; want %d, %d and 0", quiet.Startup.N, quiet.Deletion.N, quiet.InFlight, pods, pods)
		}
		if dense.Startup.N != pods || dense.Deletion.N != pods || dense.InFlight != 0 {
			t.Errorf("floor: %d starts, %d deletions, %d in grace; want %d, %d and 0", dense.Startup.N, dense.Deletion.N, dense.InFlight, pods, pods)
		}
		if during.Startup.N != pods || during.Deletion.N != pods || during.InFlight != pods {
			t.Errorf("during deletions: %d starts, %d deletions, at least %d in grace; want %d, %d and %d", during.Startup.N, during.Deletion.N, during.InFlight, pods, pods, pods)
		}
		if len(g.running) != 0 {
			t.Errorf("%d pods left running", len(g.running))
		}
	})
	t.Run("a grace period under a second is refused", func(t *testing.T) {
		_, err := RunChurnGrace(context.Background(), newGraceRunner(1), ChurnConfig{Pods: 1, Parallel: 1, Grace: 500 * time.Millisecond})
		if err == nil || !strings.Contains(err.Error(), "at least 1s") {
			t.Errorf("got %v, want a refusal of the grace", err)
		}
	})
}
