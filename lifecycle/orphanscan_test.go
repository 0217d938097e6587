package lifecycle_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// orphanListings counts the Run loop's listings of every nodeguard
// sandbox (the orphan scan's: a pod's own worker lists its UID's).
type orphanListings struct {
	lifecycle.Runtime
	n atomic.Int64
}

func (o *orphanListings) ListPodSandbox(ctx context.Context, labels map[string]string) ([]*runtimeapi.PodSandbox, error) {
	if len(labels) == 1 && labels[cri.ManagedLabel] == "true" {
		o.n.Add(1)
	}
	return o.Runtime.ListPodSandbox(ctx, labels)
}

// TestOrphanedSandboxesAreListedEveryFewPasses: an idle Run loop lists the
// sandboxes for orphans once at the sources' load and then every few
// passes, not every pass; a nodeguard sandbox with no container and no
// desired pod (one the relist cannot see) is still found by the periodic
// listing and removed.
func TestOrphanedSandboxesAreListedEveryFewPasses(t *testing.T) {
	r := newRig(t)
	calls := &orphanListings{}
	r.runtime = func(rt lifecycle.Runtime) lifecycle.Runtime { calls.Runtime = rt; return calls }
	m, _ := r.manager(t)

	// 25 passes at the rig's 200 ms Resync, timed by the heartbeat from
	// the first pass on, bounded.
	t0 := time.Now()
	deadline := t0.Add(30 * time.Second)
	for !m.Heartbeat().After(t0) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	start := m.Heartbeat()
	for m.Heartbeat().Sub(start) < 5*time.Second && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	passes := m.Heartbeat().Sub(start) / (200 * time.Millisecond)
	n := calls.n.Load()
	t.Logf("%d orphan listings in about %d passes", n, passes)
	if n < 1 {
		t.Fatalf("no orphan listing in %d passes: the sources' load asks for one", passes)
	}
	if int64(passes) >= 20 && n > int64(passes)/2 {
		t.Errorf("%d orphan listings in %d idle passes: the sandboxes are listed every pass", n, passes)
	}

	// A sandbox of nodeguard's with no container, whose pod nobody wants.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := make([]byte, 8)
	rand.Read(b)
	uid := hex.EncodeToString(b)
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "orphan-" + uid, Namespace: "orphanscan-test", Uid: uid},
		Labels:       map[string]string{cri.PodUIDLabel: uid, cri.ManagedLabel: "true"},
		LogDirectory: filepath.Join(r.env.PodsDir(), uid),
		DnsConfig:    &runtimeapi.DNSConfig{Servers: []string{"127.0.0.1"}},
		Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: r.env.CgroupParent() + "/pod" + uid},
	}
	run, err := r.env.RuntimeClient().RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	id := run.GetPodSandboxId()
	for {
		resp, err := r.env.RuntimeClient().ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{
			Filter: &runtimeapi.PodSandboxFilter{Id: id},
		})
		if err != nil {
			t.Fatalf("ListPodSandbox: %v", err)
		}
		if len(resp.GetItems()) == 0 {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the orphaned sandbox %s with no container is still there a minute on (%d orphan listings)", id, calls.n.Load())
		}
		time.Sleep(200 * time.Millisecond)
	}
}
