package lifecycle_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/eviction"
	"github.com/nodeguard/nodeguard/evictionapi"
	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/mounts"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// busyProcs and busyFiles are what the busy pod makes: sleeping processes
// beside its shell, and files in its emptyDir.
const (
	busyProcs = 20
	busyFiles = 400
)

// rankPods runs two pods of the same priority on a real containerd: quiet
// (one shell, nothing written) and busy (busyProcs more processes and
// busyFiles files in a disk emptyDir). quiet is made first, so its pod
// cgroup has the lower id: the tie-breaker the policy falls back to when
// it knows no use.
const rankPods = `
apiVersion: v1
kind: Pod
metadata: {name: quiet}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: c, image: BUSYBOX, command: [sh, -c, "echo ready; exec sleep 3600"]}
---
apiVersion: v1
kind: Pod
metadata: {name: busy}
spec:
  terminationGracePeriodSeconds: 1
  volumes: [{name: data, emptyDir: {}}]
  containers:
  - name: c
    image: BUSYBOX
    volumeMounts: [{name: data, mountPath: /data}]
    command: [sh, -c, "for i in $(seq 20); do sleep 3600 & done; i=0; while [ $i -lt 400 ]; do : > /data/f$i; i=$((i+1)); done; echo ready; wait"]
`

// TestEvictionRanksPIDAndInodePressureByUse: under pid.available and
// nodefs.inodesFree pressure the kubelet evicts, among pods of one
// priority, the one using the most PIDs or inodes. The pods the eviction
// actor reports must carry those figures, read from the pod cgroup and
// from the last storage sample, so that the policy's ranking picks busy
// and not quiet, the pod with the lower cgroup id.
func TestEvictionRanksPIDAndInodePressureByUse(t *testing.T) {
	r := newRig(t)
	m, _ := r.manager(t)
	ctx := context.Background()
	t.Cleanup(func() {
		for _, name := range []string{"quiet", "busy"} {
			m.Delete(ctx, "default", name)
			waitGone(t, m, name)
		}
	})
	// One after the other: the pod workers run in parallel, and quiet's
	// cgroup must be made first.
	for _, p := range r.pods(t, rankPods) {
		if _, err := m.Apply(ctx, []*corev1.Pod{p}, lifecycle.SourceAPI); err != nil {
			t.Fatal(err)
		}
		waitPod(t, m, p.Name, "said ready", func(p *corev1.Pod) bool {
			var logs bytes.Buffer
			return running(p) && m.Logs(ctx, "default", p.Name, lifecycle.LogOptions{Container: "c", Tail: -1}, &logs) == nil && strings.Contains(logs.String(), "ready")
		})
	}
	if _, err := m.Storage(ctx); err != nil {
		t.Fatal(err)
	}

	refs := m.EvictionActor(nil).Pods(false)
	pods := make([]evictionapi.Pod, 0, len(refs))
	byName := map[string]*evictionapi.Pod{}
	for _, ref := range refs {
		p := ref.Pod
		// The eviction manager takes the cgroup id from the snapshot;
		// the same id, read here.
		d, err := r.layout.Memory.Resolve(ref.CgroupRel)
		if err != nil {
			t.Fatal(err)
		}
		if p.CgroupID, err = cgroups.ID(d.Path); err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
	}
	for i := range pods {
		byName[pods[i].Name] = &pods[i]
	}
	quiet, busy := byName["quiet"], byName["busy"]
	if quiet == nil || busy == nil {
		t.Fatalf("the actor reports %d pods, want quiet and busy", len(refs))
	}
	t.Logf("quiet: cgroup id %d, %d PIDs, %d inodes; busy: cgroup id %d, %d PIDs, %d inodes",
		quiet.CgroupID, quiet.PIDs, quiet.Inodes, busy.CgroupID, busy.PIDs, busy.Inodes)
	if quiet.CgroupID > busy.CgroupID {
		t.Fatalf("quiet's pod cgroup has id %d, busy's %d: the test needs quiet's lower, so that a ranking without use picks quiet", quiet.CgroupID, busy.CgroupID)
	}

	// The figures are real: every process of the pod counted (its shell,
	// the sleeps, and the pause process), every file of its emptyDir.
	if busy.PIDs < busyProcs+1 {
		t.Errorf("busy has %d PIDs, want at least its %d processes", busy.PIDs, busyProcs+1)
	}
	if quiet.PIDs < 1 || quiet.PIDs >= busy.PIDs {
		t.Errorf("quiet has %d PIDs, busy %d: want at least one, and fewer than busy", quiet.PIDs, busy.PIDs)
	}
	if busy.Inodes < busyFiles {
		t.Errorf("busy uses %d inodes, want at least the %d files it wrote", busy.Inodes, busyFiles)
	}
	if quiet.Inodes >= busy.Inodes {
		t.Errorf("quiet uses %d inodes, busy %d: want fewer", quiet.Inodes, busy.Inodes)
	}

	for _, sig := range []nodestats.Signal{nodestats.SignalPIDAvailable, nodestats.SignalNodeFsInodesFree, nodestats.SignalImageFsInodesFree} {
		if first := eviction.Rank(pods, sig)[0]; first.Name != "busy" {
			t.Errorf("under %s the policy ranks %s first (%d PIDs, %d inodes, cgroup id %d), want busy (%d PIDs, %d inodes, cgroup id %d)",
				sig, first.Name, first.PIDs, first.Inodes, first.CgroupID, busy.PIDs, busy.Inodes, busy.CgroupID)
		}
	}
}

// TestEphemeralInodesCountsWhatTheKubeletCounts: the inodes of disk-backed
// volumes, writable layers and logs; a memory-backed emptyDir's inodes are
// tmpfs's, not the node filesystem's.
func TestEphemeralInodesCountsWhatTheKubeletCounts(t *testing.T) {
	s := lifecycle.PodStorage{
		Volumes: []mounts.VolumeUsage{
			{Name: "disk", Medium: mounts.MediumDisk, Inodes: 100},
			{Name: "mem", Medium: mounts.MediumMemory, Inodes: 1000},
		},
		Containers: []lifecycle.ContainerStorage{
			{Name: "a", RootfsInodes: 10, LogsInodes: 2},
			{Name: "b", RootfsInodes: 5, LogsInodes: 3},
		},
	}
	if got, want := s.EphemeralInodes(), uint64(100+10+2+5+3); got != want {
		t.Errorf("EphemeralInodes = %d, want %d", got, want)
	}
}
