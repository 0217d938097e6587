// Sandbox teardown: containers stopped with their grace, sandboxes and
// stranded tasks removed, the pod cgroup removed.

package lifecycle

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// teardownSandbox stops every container with the grace period (sidecars
// after the app containers), then the sandbox (which kills without
// grace), and removes both. parent is the pod cgroup the sandbox was made
// in ("" if unknown); with podGone the pod cgroup is removed too, as no
// other sandbox of the pod will use it. The caller holds a work slot.
func (m *Manager) teardownSandbox(ctx context.Context, id, parent string, g time.Duration, podGone bool) {
	m.teardown(ctx, id, parent, g, podGone, nil)
}

// teardown is teardownSandbox, calling afterStop (when not nil) once the
// containers are stopped and before the sandbox and they are removed.
func (m *Manager) teardown(ctx context.Context, id, parent string, g time.Duration, podGone bool, afterStop func(ctx context.Context)) {
	cctx, cancel := call(ctx)
	ctrs, err := m.cfg.Runtime.ListContainers(cctx, id, nil)
	cancel()
	if err != nil {
		m.log.Warn("list containers of sandbox", "sandbox", id, "err", err)
	}
	// The stops wait out the grace period on stop slots, not on the
	// caller's work slot (slots.go): the app containers first, then the
	// sidecars in reverse order (sidecars.go), all within g. A container
	// of a pod still known (deleted, evicted, its sandbox replaced) runs
	// its preStop hook when its wave comes.
	var running []*runtimeapi.Container
	for _, c := range ctrs {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			running = append(running, c)
		}
	}
	m.stopInWaves(ctx, terminationWaves(m.podOf(running), running), g)
	if afterStop != nil {
		afterStop(ctx)
	}
	cctx, cancel = call(ctx)
	defer cancel()
	if err := m.cfg.Runtime.StopPodSandbox(cctx, id); err != nil && !errors.Is(err, cri.ErrNotFound) {
		m.log.Warn("stop sandbox", "sandbox", id, "err", err) // a sandbox already gone is no news
	}
	remove := func(ctx context.Context) error { return m.cfg.Runtime.RemovePodSandbox(ctx, id) }
	err = remove(cctx)
	if errors.Is(err, cri.ErrFailedPrecondition) && parent != "" {
		ids := make([]string, 0, len(ctrs))
		for _, c := range ctrs {
			ids = append(ids, c.Id)
		}
		err = m.removeStranded(ctx, "sandbox", id, parent, ids, remove)
	}
	if err != nil {
		m.log.Warn("remove sandbox", "sandbox", id, "err", err)
	}
	if podGone && parent != "" {
		m.removePodCgroup(ctx, parent, false)
	}
}

// containerSpec finds the pod of a runtime's container among the pods
// nodeguard knows, by its pod UID label, and the container's spec in it
// by name: nil (and no hook) for a pod nobody wants any more.
func (m *Manager) containerSpec(c *runtimeapi.Container) (*corev1.Pod, string, *corev1.Container) {
	m.mu.Lock()
	st := m.pods[types.UID(c.GetLabels()[cri.PodUIDLabel])]
	var pod *corev1.Pod
	ip := ""
	if st != nil {
		pod, ip = st.pod, st.ip
	}
	m.mu.Unlock()
	if pod == nil {
		return nil, "", nil
	}
	name := c.GetMetadata().GetName()
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if cs[i].Name == name {
				return pod, ip, &cs[i]
			}
		}
	}
	return pod, ip, nil
}

// strandedRetries bounds the removal attempts after killing a stranded
// task: the shim sees the exit within milliseconds here; the waits double
// from 25 ms, 1.6 s in all.
const strandedRetries = 6

// removeStranded handles the runtime refusing to remove a container (or a
// sandbox, for its containers) because of a task it reports as created or
// exited: a StartContainer cut short (nodeguard killed mid-call, a
// deadline) leaves "runc init" waiting in the container's cgroup, and
// containerd will neither start nor delete it (containerd#11037).
//
// The task's processes are killed through the containers' cgroups beneath
// the pod cgroup parent (the runtime reports no pid for such a task), the
// stopped task is deleted through the runtime's own API (its CRI ignores
// the exit of a pid it never had), and remove is retried.
func (m *Manager) removeStranded(ctx context.Context, what, id, parent string, containers []string, remove func(context.Context) error) error {
	killed := 0
	for _, c := range containers {
		n, err := m.cfg.Cgroups.KillContainer(parent, c)
		if err != nil {
			m.log.Warn("kill a stranded task", "container", c, "err", err)
		}
		killed += n
	}
	var err error
	wait := 25 * time.Millisecond
	for attempt := 1; attempt <= strandedRetries; attempt++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait *= 2
		cctx, cancel := call(ctx)
		for _, c := range containers {
			if derr := m.cfg.Runtime.DeleteTask(cctx, c); derr != nil && !errors.Is(derr, cri.ErrNotContainerd) && !errors.Is(derr, cri.ErrFailedPrecondition) {
				m.log.Warn("delete a stranded task", "container", c, "err", derr)
			}
		}
		err = remove(cctx)
		cancel()
		if err == nil || !errors.Is(err, cri.ErrFailedPrecondition) {
			break
		}
	}
	m.log.Info("the runtime refused a removal for a stranded task; killed it, deleted the task and retried",
		what, id, "killed", killed, "err", err)
	return err
}

// removeContainer removes a container of the pod whose cgroup is parent,
// killing a stranded task that keeps the runtime from doing it.
func (m *Manager) removeContainer(ctx context.Context, parent, id string) error {
	logPath := m.logPath(ctx, id) // before the runtime forgets it (containerlogs.go)
	cctx, cancel := call(ctx)
	err := m.cfg.Runtime.RemoveContainer(cctx, id)
	cancel()
	if errors.Is(err, cri.ErrFailedPrecondition) && parent != "" {
		err = m.removeStranded(ctx, "container", id, parent, []string{id}, func(ctx context.Context) error {
			return m.cfg.Runtime.RemoveContainer(ctx, id)
		})
	}
	if err == nil {
		m.removeLog(id, logPath)
	}
	return err
}

// removePodCgroup removes a pod's cgroups. With kill, processes still in
// them are SIGKILLed first: only for a pod nobody wants any more.
func (m *Manager) removePodCgroup(ctx context.Context, parent string, kill bool) {
	err := m.cfg.Cgroups.Remove(ctx, parent)
	if kill && errors.Is(err, kubepods.ErrPopulated) {
		n, kerr := m.cfg.Cgroups.Kill(parent)
		m.log.Warn("processes the runtime does not know of were left in a removed pod's cgroup; killed", "cgroup", parent, "killed", n, "err", kerr)
		err = m.cfg.Cgroups.Remove(ctx, parent)
	}
	if err != nil {
		m.log.Warn("remove pod cgroup", "cgroup", parent, "err", err)
	}
}
