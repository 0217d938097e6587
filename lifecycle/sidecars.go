// Init containers and sidecars (init containers with restartPolicy
// Always, KEP-753), sequenced as the kubelet's computeInitContainerActions
// (pkg/kubelet/kuberuntime/kuberuntime_manager.go), and the order in which
// a pod's containers are stopped (its terminationOrdering).

package lifecycle

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// isSidecar tells whether init container c is a sidecar: one that keeps
// running next to the app containers and is restarted whenever it exits,
// whatever the pod's restartPolicy.
func isSidecar(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// initialized tells whether the pod's init sequence is over: some app
// container has been created (the kubelet's isPreviouslyInitialized, from
// the runtime's view, so that it holds across a restart of nodeguard).
// From then on only the sidecars are kept running; the other init
// containers are never run again.
func initialized(pod *corev1.Pod, byName map[string]*runtimeapi.Container) bool {
	for i := range pod.Spec.Containers {
		if _, ok := byName[pod.Spec.Containers[i].Name]; ok {
			return true
		}
	}
	return false
}

// regularDone tells whether every app container has exited and none will
// be started again by the pod's restartPolicy: the pod is then Succeeded
// or Failed, and its sidecars are stopped and not restarted (the kubelet
// kills such a pod, so that "restartable init containers do not keep it
// alive").
func regularDone(pod *corev1.Pod, byName map[string]*runtimeapi.Container, states map[string]cri.State) bool {
	if pod.Spec.RestartPolicy == corev1.RestartPolicyAlways {
		return false
	}
	for i := range pod.Spec.Containers {
		name := pod.Spec.Containers[i].Name
		if _, ok := byName[name]; !ok {
			return false
		}
		s := states[name]
		if s.Phase != cri.PhaseExited {
			return false
		}
		if pod.Spec.RestartPolicy == corev1.RestartPolicyOnFailure && s.ExitCode != 0 {
			return false
		}
	}
	return true
}

// syncInitContainers takes the init sequence one step, as the kubelet's
// computeInitContainerActions: init containers run one at a time in order;
// a plain one must exit 0 before the next starts, a sidecar only has to be
// started (running, and its startupProbe, if any, succeeded; a postStart
// hook has returned once it is running). A plain init container that
// fails is restarted per the pod's restartPolicy (with Never the pod has
// failed); a sidecar that exits is restarted with the back-off, always.
// Once the pod is initialized only the sidecars are kept running, unless
// done: the app containers are over for good, and the sidecars with them.
//
// It reports whether the pod is initialized (the app containers may run)
// and whether it failed for good.
func (m *Manager) syncInitContainers(ctx context.Context, st *podState, byName map[string]*runtimeapi.Container, states map[string]cri.State, done bool) (initDone, failed bool, err error) {
	pod := st.pod
	inits := pod.Spec.InitContainers
	if initialized(pod, byName) {
		if done {
			return true, false, nil
		}
		for i := range inits {
			c := &inits[i]
			if !isSidecar(c) {
				continue
			}
			if err := m.keepRunning(ctx, st, c, byName[c.Name], states[c.Name]); err != nil {
				return true, false, err
			}
		}
		return true, false, nil
	}
	// Before initialization only the last init container that has a
	// container matters: those before it did their part.
	last := -1
	for i := range inits {
		if _, ok := byName[inits[i].Name]; ok {
			last = i
		}
	}
	if last < 0 {
		if len(inits) == 0 {
			return true, false, nil
		}
		return false, false, m.startContainer(ctx, st, &inits[0], 0)
	}
	c, cur, s := &inits[last], byName[inits[last].Name], states[inits[last].Name]
	next := func() (bool, bool, error) {
		if last == len(inits)-1 {
			return true, false, nil
		}
		n := &inits[last+1]
		return false, false, m.startContainer(ctx, st, n, 0)
	}
	switch {
	case s.Phase == cri.PhaseCreated:
		return false, false, m.startCreated(ctx, st, cur)
	case isSidecar(c) && s.Phase == cri.PhaseRunning:
		if !m.probes.Started(pod.UID, c.Name, cur.Id) {
			return false, false, nil // its startupProbe decides; a failure kills it (killUnhealthy)
		}
		return next()
	case isSidecar(c) && s.Phase == cri.PhaseExited:
		return false, false, m.restart(ctx, st, c, cur, s)
	case s.Phase != cri.PhaseExited:
		return false, false, nil // running (or unknown): wait for it
	case s.ExitCode == 0:
		return next()
	case pod.Spec.RestartPolicy == corev1.RestartPolicyNever:
		return false, true, nil
	}
	return false, false, m.restart(ctx, st, c, cur, s)
}

// keepRunning starts a sidecar of an initialized pod that is missing (its
// container was removed), was left created, or exited (with the back-off).
func (m *Manager) keepRunning(ctx context.Context, st *podState, c *corev1.Container, cur *runtimeapi.Container, s cri.State) error {
	switch {
	case cur == nil:
		return m.startContainer(ctx, st, c, 0)
	case s.Phase == cri.PhaseCreated:
		return m.startCreated(ctx, st, cur)
	case s.Phase == cri.PhaseExited:
		return m.restart(ctx, st, c, cur, s)
	}
	return nil
}

// stopSidecars stops the running sidecars of a pod whose app containers
// are done (regularDone) or whose init sequence failed for good, in
// reverse order, within the pod's grace period, as the kubelet kills such
// a pod. It reports whether it stopped any.
func (m *Manager) stopSidecars(ctx context.Context, st *podState, byName map[string]*runtimeapi.Container, states map[string]cri.State) bool {
	var running []*runtimeapi.Container
	for i := range st.pod.Spec.InitContainers {
		c := &st.pod.Spec.InitContainers[i]
		if cur, ok := byName[c.Name]; ok && isSidecar(c) && states[c.Name].Phase == cri.PhaseRunning {
			running = append(running, cur)
		}
	}
	if len(running) == 0 {
		return false
	}
	m.log.Info("app containers are done; stopping the sidecars", "pod", key(st.pod), "sidecars", len(running))
	m.stopInWaves(ctx, terminationWaves(st.pod, running), grace(st.pod))
	return true
}

// terminationWaves orders a pod's running containers for stopping, as the
// kubelet's terminationOrdering: the app containers (and anything not a
// sidecar) first, all at once, then the sidecars one by one in reverse
// order of the spec, each after the ones started after it are gone, so
// that a sidecar serves the containers that need it until they exit.
// Without a pod (an orphan) everything is one wave.
func terminationWaves(pod *corev1.Pod, ctrs []*runtimeapi.Container) [][]*runtimeapi.Container {
	if pod == nil {
		return [][]*runtimeapi.Container{ctrs}
	}
	rank := map[string]int{} // sidecar name -> its wave, 1 for the last in the spec
	n := 0
	for i := range pod.Spec.InitContainers {
		if isSidecar(&pod.Spec.InitContainers[i]) {
			n++
		}
	}
	k := 0
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; isSidecar(c) {
			rank[c.Name] = n - k
			k++
		}
	}
	waves := make([][]*runtimeapi.Container, n+1)
	for _, c := range ctrs {
		w := rank[c.GetMetadata().GetName()] // 0 for an app container
		waves[w] = append(waves[w], c)
	}
	return slices.DeleteFunc(waves, func(w []*runtimeapi.Container) bool { return len(w) == 0 })
}

// stopInWaves stops the containers wave by wave, each wave's together on
// stop slots, all within g: a later wave gets what its predecessors left
// of the grace period (the kubelet's waitForTurn shortens it the same
// way), at worst none, and is then killed at once.
func (m *Manager) stopInWaves(ctx context.Context, waves [][]*runtimeapi.Container, g time.Duration) {
	start := m.now()
	for _, wave := range waves {
		left := max(g-m.now().Sub(start), 0)
		stops := make([]func(), 0, len(wave))
		for _, c := range wave {
			stops = append(stops, func() {
				sctx, cancel := context.WithTimeout(ctx, left+callTimeout)
				defer cancel()
				if err := m.cfg.Runtime.StopContainer(sctx, c.Id, left); err != nil {
					m.log.Warn("stop container", "container", c.Id, "name", c.GetMetadata().GetName(), "err", err)
				}
			})
		}
		m.slots.waitOut(stops)
	}
}

// podOf is the desired pod whose sandbox holds ctrs, nil if none is (an
// orphan, whose containers are stopped in no particular order).
func (m *Manager) podOf(ctrs []*runtimeapi.Container) *corev1.Pod {
	for _, c := range ctrs {
		uid := types.UID(c.GetLabels()[cri.PodUIDLabel])
		if uid == "" {
			continue
		}
		m.mu.Lock()
		st := m.pods[uid]
		m.mu.Unlock()
		if st != nil {
			return st.pod
		}
		return nil
	}
	return nil
}
