package lifecycle_test

import (
	"context"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/eviction"
	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/loader/event"
	"github.com/nodeguard/nodeguard/pressure"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

const sleeperPod = `
apiVersion: v1
kind: Pod
metadata: {name: sleeper}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - {name: main, image: BUSYBOX, command: [sleep, "3600"]}
`

// TestAnOOMKillInAPodCgroupTheSnapshotLacksIsAttributed: the eviction
// manager attributes an OOM kill by the victim's memory cgroup id through
// its last snapshot; a pod cgroup born since is not in it, and then the
// pod cgroup id the lifecycle reports is the fallback. The lifecycle must
// report it: a real pod on containerd, a snapshot without its cgroup, and
// an OOM kill record whose memcg is the pod cgroup.
func TestAnOOMKillInAPodCgroupTheSnapshotLacksIsAttributed(t *testing.T) {
	r := newRig(t)
	m, _ := r.manager(t)
	if _, err := m.Apply(context.Background(), r.pods(t, sleeperPod), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, m, "sleeper", "ran", running)
	parent, err := r.cg.Parent(p)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := r.cg.MemoryDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	id, err := cgroups.ID(dir.Path)
	if err != nil {
		t.Fatal(err)
	}

	actor := m.EvictionActor(nil)
	listed := false
	for _, ref := range actor.Pods(false) {
		if ref.UID != p.UID {
			continue
		}
		listed = true
		if ref.CgroupID != id {
			t.Errorf("the lifecycle reports pod cgroup id %d for %s, the kernel's is %d", ref.CgroupID, dir.Path, id)
		}
	}
	if !listed {
		t.Fatalf("the running pod %s is not among the eviction actor's pods", p.UID)
	}

	// A node at ease, and none of the pods' cgroups in the snapshot.
	em, err := eviction.NewManager(eviction.ManagerConfig{
		Actor: actor, Tick: time.Hour,
		Snapshot: func(context.Context) (*pressure.Snapshot, error) {
			now := time.Now()
			return &pressure.Snapshot{Time: now, Signals: []nodestats.Observation{
				{Signal: nodestats.SignalMemoryAvailable, Available: 6 << 30, Capacity: 8 << 30, Time: now}}}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { _ = em.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	for deadline := time.Now().Add(5 * time.Second); em.Evaluations() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no evaluation")
		}
	}

	kill := &event.OOMKill{Header: event.Header{Kind: event.KindOOMKill, PID: 4242, MemcgID: id},
		Comm: "sleep", MemcgHierarchy: r.layout.Memory.ID}
	a := em.Attribute(kill, time.Now())
	if a.Pod == nil || a.Pod.UID != p.UID {
		t.Fatalf("an OOM kill in pod cgroup %d (%s) attributed to %+v, want pod %s", id, dir.Path, a.Pod, p.UID)
	}
	if a.Cgroup != dir.Rel {
		t.Errorf("attributed cgroup %q, want the pod cgroup %q", a.Cgroup, dir.Rel)
	}
}
