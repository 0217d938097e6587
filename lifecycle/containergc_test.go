package lifecycle

import (
	"context"
	"errors"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

func gcContainer(id, sandbox, uid, name string, attempt uint32, state runtimeapi.ContainerState) *runtimeapi.Container {
	return &runtimeapi.Container{Id: id, PodSandboxId: sandbox, State: state, CreatedAt: int64(attempt),
		Metadata: &runtimeapi.ContainerMetadata{Name: name, Attempt: attempt},
		Labels:   map[string]string{cri.PodUIDLabel: uid, cri.ManagedLabel: "true"}}
}

func gcSandbox(id, uid string, attempt uint32, ready bool) *runtimeapi.PodSandbox {
	st := runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	if ready {
		st = runtimeapi.PodSandboxState_SANDBOX_READY
	}
	return &runtimeapi.PodSandbox{Id: id, State: st, CreatedAt: int64(attempt),
		Metadata: &runtimeapi.PodSandboxMetadata{Uid: uid, Attempt: attempt}}
}

const (
	ctrExited  = runtimeapi.ContainerState_CONTAINER_EXITED
	ctrRunning = runtimeapi.ContainerState_CONTAINER_RUNNING
	ctrCreated = runtimeapi.ContainerState_CONTAINER_CREATED
)

func TestSelectUnused(t *testing.T) {
	for _, tc := range []struct {
		name           string
		ctrs           []*runtimeapi.Container
		sbs            []*runtimeapi.PodSandbox
		desired        []types.UID
		current        map[types.UID]string
		notReady       bool // sources not loaded yet
		wantContainers []string
		wantSandboxes  []string
	}{
		{
			name: "a live pod keeps its newest dead attempt of each container",
			ctrs: []*runtimeapi.Container{
				gcContainer("app-0", "sb", "p", "app", 0, ctrExited), gcContainer("app-1", "sb", "p", "app", 1, ctrExited),
				gcContainer("app-2", "sb", "p", "app", 2, ctrRunning), gcContainer("side-0", "sb", "p", "side", 0, ctrExited),
			},
			sbs: []*runtimeapi.PodSandbox{gcSandbox("sb", "p", 0, true)}, desired: []types.UID{"p"}, current: map[types.UID]string{"p": "sb"},
			wantContainers: []string{"app-0"},
		},
		{
			name: "created containers are left to the pod's own sync",
			ctrs: []*runtimeapi.Container{gcContainer("app-0", "sb", "p", "app", 0, ctrExited), gcContainer("app-1", "sb", "p", "app", 1, ctrCreated),
				gcContainer("app-2", "sb", "p", "app", 2, ctrExited)},
			sbs: []*runtimeapi.PodSandbox{gcSandbox("sb", "p", 0, true)}, desired: []types.UID{"p"}, current: map[types.UID]string{"p": "sb"},
			wantContainers: []string{"app-0"},
		},
		{
			name:           "a pod nobody wants loses every dead container and dead sandbox",
			ctrs:           []*runtimeapi.Container{gcContainer("app-0", "old", "gone", "app", 0, ctrExited), gcContainer("app-1", "old", "gone", "app", 1, ctrExited)},
			sbs:            []*runtimeapi.PodSandbox{gcSandbox("old", "gone", 0, false), gcSandbox("older", "gone", 0, false)},
			wantContainers: []string{"app-0", "app-1"}, wantSandboxes: []string{"old", "older"},
		},
		{
			name:     "before every source is loaded an unknown pod keeps its newest",
			ctrs:     []*runtimeapi.Container{gcContainer("app-0", "old", "unknown", "app", 0, ctrExited), gcContainer("app-1", "old", "unknown", "app", 1, ctrExited)},
			sbs:      []*runtimeapi.PodSandbox{gcSandbox("old", "unknown", 1, false), gcSandbox("older", "unknown", 0, false)},
			notReady: true, wantContainers: []string{"app-0"}, wantSandboxes: []string{"older"},
		},
		{
			name: "a live pod's older dead sandboxes go, the newest and the current one stay, a ready one and one with a container stay",
			ctrs: []*runtimeapi.Container{gcContainer("run", "s3", "p", "app", 0, ctrRunning), gcContainer("kept", "s1", "p", "side", 0, ctrExited)},
			sbs: []*runtimeapi.PodSandbox{gcSandbox("s0", "p", 0, false), gcSandbox("s1", "p", 1, false), gcSandbox("s2", "p", 2, true),
				gcSandbox("s3", "p", 3, false), gcSandbox("s4", "p", 4, false)},
			desired: []types.UID{"p"}, current: map[types.UID]string{"p": "s3"},
			wantSandboxes: []string{"s0"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sel := selectUnused(tc.ctrs, tc.sbs, func(uid types.UID) bool { return slices.Contains(tc.desired, uid) },
				func(uid types.UID) string { return tc.current[uid] }, !tc.notReady)
			var gotC, gotS []string
			for _, c := range sel.containers {
				gotC = append(gotC, c.Id)
			}
			for _, s := range sel.sandboxes {
				gotS = append(gotS, s.Id)
			}
			if !slices.Equal(gotC, tc.wantContainers) || !slices.Equal(gotS, tc.wantSandboxes) {
				t.Errorf("removes containers %v and sandboxes %v, want %v and %v", gotC, gotS, tc.wantContainers, tc.wantSandboxes)
			}
		})
	}
}

// fakeCollectors records the node-level reclaim calls in order.
type fakeCollectors struct {
	calls         []string
	containersErr error
}

func (f *fakeCollectors) DeleteAllUnusedContainers(context.Context) (ContainerGCResult, error) {
	f.calls = append(f.calls, "containers")
	return ContainerGCResult{Containers: 2, Sandboxes: 1}, f.containersErr
}

func (f *fakeCollectors) DeleteUnusedImages(context.Context) (int64, error) {
	f.calls = append(f.calls, "images")
	return 1 << 30, nil
}

func TestNodeReclaimerRunsTheKubeletsReclaimFunctions(t *testing.T) {
	for _, tc := range []struct {
		name      string
		dedicated bool
		signal    nodestats.Signal
		want      []string
	}{
		{"shared filesystem: nodefs removes dead containers, then unused images", false, nodestats.SignalNodeFsAvailable, []string{"containers", "images"}},
		{"shared filesystem: imagefs inodes the same", false, nodestats.SignalImageFsInodesFree, []string{"containers", "images"}},
		{"dedicated imagefs: imagefs removes dead containers, then unused images", true, nodestats.SignalImageFsAvailable, []string{"containers", "images"}},
		{"dedicated imagefs: nodefs has nothing to reclaim", true, nodestats.SignalNodeFsInodesFree, nil},
		{"memory has no node-level reclaim", false, nodestats.SignalMemoryAvailable, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeCollectors{}
			var told []int64
			r := &NodeReclaimer{Containers: f, Images: f, DedicatedImageFS: tc.dedicated,
				OnReclaim: func(_ nodestats.Signal, c ContainerGCResult, b int64) { told = append(told, int64(c.Containers), b) }}
			ran, err := r.ReclaimNode(t.Context(), tc.signal)
			if err != nil {
				t.Fatal(err)
			}
			if ran != (tc.want != nil) || !slices.Equal(f.calls, tc.want) {
				t.Errorf("ran %v calling %v, want %v", ran, f.calls, tc.want)
			}
			if tc.want != nil && !slices.Equal(told, []int64{2, 1 << 30}) {
				t.Errorf("OnReclaim told %v", told)
			}
		})
	}
	t.Run("images are collected even when the container collection fails", func(t *testing.T) {
		boom := errors.New("list containers: unavailable")
		f := &fakeCollectors{containersErr: boom}
		ran, err := (&NodeReclaimer{Containers: f, Images: f}).ReclaimNode(t.Context(), nodestats.SignalImageFsAvailable)
		if !ran || !errors.Is(err, boom) || !slices.Equal(f.calls, []string{"containers", "images"}) {
			t.Errorf("ran %v, err %v, calls %v", ran, err, f.calls)
		}
	})
}
