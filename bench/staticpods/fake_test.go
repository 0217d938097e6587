package staticpods

import (
	"context"
	"maps"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// fakeRuntime is a runtime's listings in memory: ListPodSandbox,
// ListContainers (with containerd's label-selector filtering) and
// ContainerStatus, counted. Any other call panics (the embedded nil
// interface): the Client must make no other.
type fakeRuntime struct {
	runtimeapi.RuntimeServiceClient

	mu         sync.Mutex
	sandboxes  []*runtimeapi.PodSandbox
	containers []*runtimeapi.Container
	statuses   map[string]*runtimeapi.ContainerStatus
	calls      map[string]int
	// selectors are the label selectors of the ListPodSandbox calls.
	selectors []map[string]string
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{statuses: map[string]*runtimeapi.ContainerStatus{}, calls: map[string]int{}}
}

func matches(labels, selector map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func (f *fakeRuntime) ListPodSandbox(_ context.Context, req *runtimeapi.ListPodSandboxRequest, _ ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls["ListPodSandbox"]++
	sel := req.GetFilter().GetLabelSelector()
	f.selectors = append(f.selectors, maps.Clone(sel))
	var out []*runtimeapi.PodSandbox
	for _, sb := range f.sandboxes {
		if matches(sb.GetLabels(), sel) {
			out = append(out, sb)
		}
	}
	return &runtimeapi.ListPodSandboxResponse{Items: out}, nil
}

func (f *fakeRuntime) ListContainers(_ context.Context, req *runtimeapi.ListContainersRequest, _ ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls["ListContainers"]++
	var out []*runtimeapi.Container
	for _, c := range f.containers {
		if matches(c.GetLabels(), req.GetFilter().GetLabelSelector()) {
			out = append(out, c)
		}
	}
	return &runtimeapi.ListContainersResponse{Containers: out}, nil
}

func (f *fakeRuntime) ContainerStatus(_ context.Context, req *runtimeapi.ContainerStatusRequest, _ ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls["ContainerStatus"]++
	st, ok := f.statuses[req.GetContainerId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "container %q: not found", req.GetContainerId())
	}
	return &runtimeapi.ContainerStatusResponse{Status: st}, nil
}

func (f *fakeRuntime) count(call string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[call]
}

func (f *fakeRuntime) resetCounts() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = map[string]int{}
	f.selectors = nil
}

// addSandbox adds a sandbox of the pod the agent named name in ns.
func (f *fakeRuntime) addSandbox(id, ns, name string, state runtimeapi.PodSandboxState, createdAt int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sandboxes = append(f.sandboxes, &runtimeapi.PodSandbox{
		Id:        id,
		Metadata:  &runtimeapi.PodSandboxMetadata{Name: name, Namespace: ns, Uid: "uid-" + id},
		State:     state,
		CreatedAt: createdAt,
		Labels:    map[string]string{cri.PodNamespaceLabel: ns, cri.PodNameLabel: name, cri.PodUIDLabel: "uid-" + id},
	})
}

// setSandbox changes a sandbox's state.
func (f *fakeRuntime) setSandbox(id string, state runtimeapi.PodSandboxState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, sb := range f.sandboxes {
		if sb.Id == id {
			sb.State = state
		}
	}
}

// addContainer adds container cname of sandbox sb (of pod ns/name as the
// agent named it), in state with the times given (ns since the epoch);
// exit is its exit code once exited.
func (f *fakeRuntime) addContainer(id, sb, ns, name, cname string, state runtimeapi.ContainerState, createdAt, startedAt int64, exit int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	labels := map[string]string{cri.PodNamespaceLabel: ns, cri.PodNameLabel: name, cri.ContainerNameLabel: cname}
	f.containers = append(f.containers, &runtimeapi.Container{
		Id: id, PodSandboxId: sb, Metadata: &runtimeapi.ContainerMetadata{Name: cname},
		Image: &runtimeapi.ImageSpec{Image: "busybox"}, ImageRef: "sha256:b0", State: state, CreatedAt: createdAt, Labels: labels,
	})
	st := &runtimeapi.ContainerStatus{Id: id, State: state, CreatedAt: createdAt, StartedAt: startedAt}
	if state == runtimeapi.ContainerState_CONTAINER_EXITED {
		st.ExitCode, st.FinishedAt = exit, startedAt+1e9
	}
	f.statuses[id] = st
}

// setContainer changes a container's state in its listing and status.
func (f *fakeRuntime) setContainer(id string, state runtimeapi.ContainerState, exit int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.containers {
		if c.Id == id {
			c.State = state
		}
	}
	if st := f.statuses[id]; st != nil {
		st = &runtimeapi.ContainerStatus{Id: id, State: state, CreatedAt: st.CreatedAt, StartedAt: st.StartedAt}
		if state == runtimeapi.ContainerState_CONTAINER_EXITED {
			st.ExitCode, st.FinishedAt = exit, st.StartedAt+1e9
		}
		f.statuses[id] = st
	}
}

// removeAll forgets every sandbox and container (a runtime's GC).
func (f *fakeRuntime) removeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sandboxes, f.containers, f.statuses = nil, nil, map[string]*runtimeapi.ContainerStatus{}
}
