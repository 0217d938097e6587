package lifecycle_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/internal/statestore"
	"github.com/nodeguard/nodeguard/lifecycle"
)

// raisePod's container sets its own oom_score_adj before it runs on:
// what it put there, not the kubelet's value for it, is what it had.
const raisePod = `
apiVersion: v1
kind: Pod
metadata: {name: raise}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: BUSYBOX
    command: [sh, -c, "echo 500 > /proc/self/oom_score_adj; exec sleep 3600"]
    resources:
      requests: {memory: 64Mi}
`

func oomScoreAdjOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/oom_score_adj")
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// The next victim's oom_score_adj is raised on every process of its pod,
// the sandbox's pause process included; Restore puts back on each of them
// the value it had. The pause process (containerd gives it -998 where it
// may, else what it inherits) must not stay at 1000, the first the kernel
// OOM killer would take, and the container process gets back the value it
// chose, not the kubelet's.
func TestRestoreOOMScoreAdjPutsBackWhatWasRaised(t *testing.T) {
	r := newRig(t)
	m, _ := r.manager(t)
	ctx := context.Background()
	pods := r.pods(t, raisePod)
	if _, err := m.Apply(ctx, pods, lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	waitPod(t, m, "raise", "ran", running)
	sb, parent := onlySandbox(t, r, pods[0].UID)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	ctrs, err := r.client.ListContainers(cctx, sb.Id, nil)
	cancel()
	if err != nil || len(ctrs) != 1 {
		t.Fatalf("containers of the pod: %d, %v", len(ctrs), err)
	}
	main, err := r.cg.ContainerProcs(parent, ctrs[0].Id)
	if err != nil || len(main) != 1 {
		t.Fatalf("processes of the container: %v, %v", main, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for oomScoreAdjOf(t, main[0]) != 500 {
		if time.Now().After(deadline) {
			t.Fatalf("the container never set its oom_score_adj to 500 (it has %d)", oomScoreAdjOf(t, main[0]))
		}
		time.Sleep(10 * time.Millisecond)
	}
	all, err := r.cg.Procs(parent)
	if err != nil {
		t.Fatal(err)
	}
	sandbox := slices.DeleteFunc(slices.Clone(all), func(pid int) bool { return slices.Contains(main, pid) })
	if len(sandbox) == 0 {
		t.Fatalf("no sandbox process in the pod cgroup (pids %v, the container's %v)", all, main)
	}
	before := map[int]int{}
	for _, pid := range all {
		before[pid] = oomScoreAdjOf(t, pid)
	}
	for _, pid := range sandbox {
		if before[pid] >= 1000 {
			t.Fatalf("sandbox process %d starts at oom_score_adj %d: nothing to tell apart", pid, before[pid])
		}
	}

	store, err := statestore.Open(t.TempDir(), statestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := m.EvictionActor(nil)
	if _, err := a.RepairOOMScoreAdj(store); err != nil {
		t.Fatal(err)
	}
	if err := a.SetOOMScoreAdj(pods[0].UID, 1000); err != nil {
		t.Fatal(err)
	}
	for _, pid := range all {
		if got := oomScoreAdjOf(t, pid); got != 1000 {
			t.Errorf("pid %d raised to %d, want 1000", pid, got)
		}
	}
	if err := a.RestoreOOMScoreAdj(pods[0].UID); err != nil {
		t.Fatal(err)
	}
	for _, pid := range all {
		what := "container process"
		if slices.Contains(sandbox, pid) {
			what = "sandbox (pause) process"
		}
		if got := oomScoreAdjOf(t, pid); got != before[pid] {
			t.Errorf("%s %d restored to %d, want %d, what it had", what, pid, got, before[pid])
		}
	}

	// Raised again, and the agent dies before it restores: the next
	// one's actor, on the same store, puts back what each had.
	if err := a.SetOOMScoreAdj(pods[0].UID, 1000); err != nil {
		t.Fatal(err)
	}
	rep, err := m.EvictionActor(nil).RepairOOMScoreAdj(store)
	if err != nil || rep.Pods != 1 || rep.Restored != len(all) {
		t.Errorf("repair after the agent: %+v, %v; want the pod's %d processes restored", rep, err, len(all))
	}
	for _, pid := range all {
		if got := oomScoreAdjOf(t, pid); got != before[pid] {
			t.Errorf("pid %d repaired to %d, want %d, what it had", pid, got, before[pid])
		}
	}
}
