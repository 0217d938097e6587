package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// maxDeadPerContainer is the kubelet's MaxPerPodContainer default
// (--maximum-dead-containers-per-container=1): one dead attempt of each
// container of a live pod is kept, for its logs and exit status.
const maxDeadPerContainer = 1

// ContainerGCResult counts what DeleteAllUnusedContainers removed.
type ContainerGCResult struct {
	Containers, Sandboxes int
}

// gcSelection is what a container collection removes.
type gcSelection struct {
	containers []*runtimeapi.Container
	sandboxes  []*runtimeapi.PodSandbox
}

// selectUnused picks, among nodeguard's containers and sandboxes, what no
// pod needs any more, as the kubelet's container GC with
// evictTerminatedPods (pkg/kubelet/kuberuntime/kuberuntime_gc.go, called
// by the eviction manager's DeleteAllUnusedContainers):
//
//   - exited containers of a pod that is not desired (once every source
//     is loaded: before that an unknown pod may just not be read yet);
//   - of a desired pod, exited attempts beyond the newest
//     maxDeadPerContainer of each container name (newest by attempt, then
//     creation);
//   - sandboxes that are not ready and hold no container that stays: all
//     of a pod not desired, all but the newest of a desired pod, and
//     never the one the pod runs in (current).
//
// Created and unknown containers are left alone: a created one may be
// about to start, an unknown one needs a stop the pod's own sync makes.
func selectUnused(ctrs []*runtimeapi.Container, sbs []*runtimeapi.PodSandbox, desired func(types.UID) bool, current func(types.UID) string, sourcesReady bool) gcSelection {
	var sel gcSelection
	gone := func(uid types.UID) bool { return sourcesReady && !desired(uid) }
	type unit struct {
		uid  types.UID
		name string
	}
	dead := map[unit][]*runtimeapi.Container{}
	for _, c := range ctrs {
		if c.GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
			continue
		}
		u := unit{types.UID(c.GetLabels()[cri.PodUIDLabel]), c.GetMetadata().GetName()}
		dead[u] = append(dead[u], c)
	}
	removed := map[string]bool{}
	for u, cs := range dead {
		keep := maxDeadPerContainer
		if gone(u.uid) {
			keep = 0
		}
		slices.SortFunc(cs, func(a, b *runtimeapi.Container) int { // newest first
			return cmp.Or(cmp.Compare(b.GetMetadata().GetAttempt(), a.GetMetadata().GetAttempt()),
				cmp.Compare(b.GetCreatedAt(), a.GetCreatedAt()), cmp.Compare(a.GetId(), b.GetId()))
		})
		for _, c := range cs[min(keep, len(cs)):] {
			sel.containers = append(sel.containers, c)
			removed[c.GetId()] = true
		}
	}
	slices.SortFunc(sel.containers, func(a, b *runtimeapi.Container) int { return cmp.Compare(a.GetId(), b.GetId()) })

	holds := map[string]bool{} // sandboxes with a container that stays
	for _, c := range ctrs {
		if !removed[c.GetId()] {
			holds[c.GetPodSandboxId()] = true
		}
	}
	byPod := map[types.UID][]*runtimeapi.PodSandbox{}
	for _, sb := range sbs {
		uid := types.UID(sb.GetMetadata().GetUid())
		byPod[uid] = append(byPod[uid], sb)
	}
	for uid, list := range byPod {
		slices.SortFunc(list, func(a, b *runtimeapi.PodSandbox) int { // newest first
			return cmp.Or(cmp.Compare(b.GetMetadata().GetAttempt(), a.GetMetadata().GetAttempt()),
				cmp.Compare(b.GetCreatedAt(), a.GetCreatedAt()), cmp.Compare(a.GetId(), b.GetId()))
		})
		if !gone(uid) {
			list = list[1:] // the newest stays while the pod exists
		}
		for _, sb := range list {
			if sb.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY || holds[sb.GetId()] || sb.GetId() == current(uid) {
				continue
			}
			sel.sandboxes = append(sel.sandboxes, sb)
		}
	}
	slices.SortFunc(sel.sandboxes, func(a, b *runtimeapi.PodSandbox) int { return cmp.Compare(a.GetId(), b.GetId()) })
	return sel
}

// DeleteAllUnusedContainers removes nodeguard's dead containers and
// sandboxes that no pod needs any more (see selectUnused): the first
// node-level reclaim of the eviction path for disk pressure, as the
// kubelet's ContainerGC.DeleteAllUnusedContainers. It never touches
// another client's containers or sandboxes. Failures are joined; what
// could be removed is.
func (m *Manager) DeleteAllUnusedContainers(ctx context.Context) (ContainerGCResult, error) {
	cctx, cancel := call(ctx)
	ctrs, err := m.cfg.Runtime.ListContainers(cctx, "", nil)
	if err != nil {
		cancel()
		return ContainerGCResult{}, fmt.Errorf("container gc: %w", err)
	}
	sbs, err := m.cfg.Runtime.ListPodSandbox(cctx, nil)
	cancel()
	if err != nil {
		return ContainerGCResult{}, fmt.Errorf("container gc: %w", err)
	}
	m.mu.Lock()
	cur := make(map[types.UID]string, len(m.pods))
	for uid, st := range m.pods {
		cur[uid] = st.sandboxID
	}
	// A pod kept because its source could not be loaded (sources.go) is
	// treated as desired: its dead containers keep their last logs.
	for _, sb := range sbs {
		uid := types.UID(sb.GetMetadata().GetUid())
		if _, ok := cur[uid]; !ok && m.unavailable.why(sb) != nil {
			cur[uid] = ""
		}
	}
	m.mu.Unlock()
	desired := func(uid types.UID) bool { _, ok := cur[uid]; return ok }
	sel := selectUnused(ctrs, sbs, desired, func(uid types.UID) string { return cur[uid] }, m.sourcesReady.Load())

	parents := make(map[string]string, len(sbs))
	for _, sb := range sbs {
		parents[sb.GetId()] = sb.GetAnnotations()[AnnotationCgroupParent]
	}
	var res ContainerGCResult
	var errs []error
	for _, c := range sel.containers {
		if err := m.removeContainer(ctx, parents[c.GetPodSandboxId()], c.GetId()); err != nil && !errors.Is(err, cri.ErrNotFound) {
			errs = append(errs, fmt.Errorf("container gc: %w", err))
			continue
		}
		res.Containers++
		m.log.Info("container gc: removed a dead container", "container", c.GetId(), "name", c.GetMetadata().GetName(),
			"attempt", c.GetMetadata().GetAttempt(), "uid", c.GetLabels()[cri.PodUIDLabel])
	}
	for _, sb := range sel.sandboxes {
		// The kubelet stops before it removes: a sandbox reported not
		// ready may still hold its network.
		cctx, cancel := call(ctx)
		err := m.cfg.Runtime.StopPodSandbox(cctx, sb.GetId())
		if err == nil || errors.Is(err, cri.ErrNotFound) {
			err = m.cfg.Runtime.RemovePodSandbox(cctx, sb.GetId())
		}
		cancel()
		if err != nil && !errors.Is(err, cri.ErrNotFound) {
			errs = append(errs, fmt.Errorf("container gc: %w", err))
			continue
		}
		res.Sandboxes++
		m.log.Info("container gc: removed a dead sandbox", "sandbox", sb.GetId(), "uid", sb.GetMetadata().GetUid(),
			"attempt", sb.GetMetadata().GetAttempt())
	}
	return res, errors.Join(errs...)
}
