package staticpods_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/bench"
	"github.com/nodeguard/nodeguard/bench/agentproc"
	"github.com/nodeguard/nodeguard/bench/staticpods"
	"github.com/nodeguard/nodeguard/lab/crienv"
	"github.com/nodeguard/nodeguard/lab/testbin"
	"github.com/nodeguard/nodeguard/lifecycle/api"
)

func TestMain(m *testing.M) { testbin.Main(m) }

// The Client is what the benchmarks drive an agent through.
var _ bench.PodClient = (*staticpods.Client)(nil)

// Bounds of the real test: a pod runs within seconds on an idle private
// containerd; these only end a run that went wrong.
const (
	agentTestTimeout = 5 * time.Minute
	waitBound        = 2 * time.Minute
	pollEvery        = 100 * time.Millisecond
)

func busyboxPod(name, image string) []byte {
	return fmt.Appendf(nil, `apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: bench}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: main
    image: %s
    imagePullPolicy: Never
    command: [sleep, "3600"]
    resources: {limits: {memory: 16Mi}}
`, name, image)
}

// nodeguard runs two busybox pods from its manifest directory, written
// by the Client, and the Client sees them Running, then one gone after
// its Delete while the other still runs, reading the private containerd
// only.
func TestNodeguardRunsPodsWrittenAndReadByTheClient(t *testing.T) {
	env := crienv.New(t)
	bin := testbin.Nodeguard(t)
	ctx, cancel := context.WithTimeout(t.Context(), agentTestTimeout)
	defer cancel()

	dir := t.TempDir()
	manifests, agentDir := filepath.Join(dir, "manifests"), filepath.Join(dir, "agent")
	for _, d := range []string{manifests, agentDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	addr, err := agentproc.FreeLoopbackAddr()
	if err != nil {
		t.Fatal(err)
	}
	a, err := agentproc.New(bin, agentDir, "", []string{"--runtime-endpoint", env.Endpoint(),
		"--cgroup-root", env.CgroupParent() + "/ng", "--metrics-addr", addr, "--log-level", "warn"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx, map[string]any{"network": agentproc.PrivateNetwork(env), "podManifestPath": manifests}); err != nil {
		a.Close()
		t.Fatal(err)
	}
	c, err := staticpods.New(manifests, env.RuntimeClient())
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	// Whatever happened, the pods go before the agent stops (it leaves
	// running pods behind), and the agent before the runtime.
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), waitBound)
		defer cancel()
		for _, name := range []string{"first", "second"} {
			if err := c.Delete(cctx, "bench", name); err != nil && !errors.Is(err, api.ErrNotFound) {
				t.Errorf("cleanup: delete %s: %v", name, err)
			}
			if _, err := waitGone(cctx, c, name); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
		if err := a.Close(); err != nil {
			t.Errorf("stop the agent: %v (log %s)", err, a.LogPath())
		}
	})

	applied := map[string]time.Time{}
	for _, name := range []string{"first", "second"} {
		applied[name] = time.Now()
		if _, err := c.Apply(ctx, busyboxPod(name, env.BusyboxImage()), "test/"+name); err != nil {
			t.Fatalf("apply %s: %v", name, err)
		}
	}
	seen, err := waitRunning(ctx, c, "first", "second")
	if err != nil {
		t.Fatalf("%v (agent log %s)", err, a.LogPath())
	}
	for name, sg := range seen {
		p := sg.pod
		started := p.Status.ContainerStatuses[0].State.Running.StartedAt.Time
		t.Logf("%s: apply -> sandbox created %s, -> container started %s (the runtime's times), -> seen Running %s (polling every %s)",
			name, p.CreationTimestamp.Sub(applied[name]).Round(time.Millisecond), started.Sub(applied[name]).Round(time.Millisecond),
			sg.at.Sub(applied[name]).Round(time.Millisecond), pollEvery)
		if p.UID == "" || p.CreationTimestamp.IsZero() || started.Before(p.CreationTimestamp.Time) {
			t.Errorf("%s: uid %q, created %s, started %s: want the runtime's uid, and a start after the sandbox's creation", name, p.UID, p.CreationTimestamp, started)
		}
	}

	deleted := time.Now()
	if err := c.Delete(ctx, "bench", "first"); err != nil {
		t.Fatalf("delete first: %v", err)
	}
	gone, err := waitGone(ctx, c, "first")
	if err != nil {
		t.Fatalf("%v (agent log %s)", err, a.LogPath())
	}
	t.Logf("first: delete -> gone (no sandbox ready, no container running) seen %s after", gone.Sub(deleted).Round(time.Millisecond))
	p, err := c.Get(ctx, "bench", "second")
	if err != nil || p.Status.Phase != corev1.PodRunning {
		t.Fatalf("second after first's deletion: %v, %v; want it Running", p, err)
	}
	l, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 1 || l.Items[0].Name != "second" {
		var names []string
		for _, p := range l.Items {
			names = append(names, p.Namespace+"/"+p.Name+" "+string(p.Status.Phase))
		}
		t.Errorf("List after first's deletion: %v, want bench/second alone", names)
	}
}

// sighting is a pod as first seen Running, and when.
type sighting struct {
	pod *corev1.Pod
	at  time.Time
}

// waitRunning polls List until every named pod is Running.
func waitRunning(ctx context.Context, c *staticpods.Client, names ...string) (map[string]sighting, error) {
	ctx, cancel := context.WithTimeout(ctx, waitBound)
	defer cancel()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	seen := map[string]sighting{}
	for {
		l, err := c.List(ctx)
		if err != nil {
			return nil, fmt.Errorf("list: %w", err)
		}
		now := time.Now()
		for i := range l.Items {
			p := &l.Items[i]
			if _, ok := seen[p.Name]; ok || !want[p.Name] || p.Namespace != "bench" || p.Status.Phase != corev1.PodRunning {
				continue
			}
			seen[p.Name] = sighting{pod: p, at: now}
		}
		if len(seen) == len(names) {
			return seen, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%d of %d pods Running after %s: %w", len(seen), len(names), waitBound, ctx.Err())
		case <-time.After(pollEvery):
		}
	}
}

// waitGone polls Get until it answers api.ErrNotFound, and returns when.
func waitGone(ctx context.Context, c *staticpods.Client, name string) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, waitBound)
	defer cancel()
	for {
		_, err := c.Get(ctx, "bench", name)
		switch {
		case errors.Is(err, api.ErrNotFound):
			return time.Now(), nil
		case err != nil:
			return time.Time{}, fmt.Errorf("get %s: %w", name, err)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%s not gone after %s: %w", name, waitBound, ctx.Err())
		case <-time.After(pollEvery):
		}
	}
}
