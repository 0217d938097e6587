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

// initOp is what a sync does to one init container.
type initOp int

const (
	// opStart starts its first attempt.
	opStart initOp = iota
	// opStartCreated starts a container left created (startCreated).
	opStartCreated
	// opRestart starts its next attempt once the back-off allows
	// (restart).
	opRestart
	// opReplaceUnknown stops a container in an unknown state and starts
	// its next attempt (replaceUnknown).
	opReplaceUnknown
)

// initStep is one init container (by index) and what to do to it.
type initStep struct {
	index int
	op    initOp
}

// initPlan is one sync's decision on the init containers.
type initPlan struct {
	steps []initStep
	// initDone: the pod is initialized, the app containers may run.
	initDone bool
	// failed: a plain init container failed under restartPolicy Never;
	// the pod has failed for good.
	failed bool
}

// planInit takes the init sequence one step, as the kubelet's
// computeInitContainerActions, from the runtime's view (byName, states)
// and the startup probes' (started). Init containers run one at a time in
// order; a plain one must exit 0 before the next starts, a sidecar only
// has to be started (running, and its startupProbe, if any, succeeded; a
// postStart hook has returned once it is running). A plain init container
// that fails is restarted per the pod's restartPolicy (with Never the pod
// has failed); a sidecar that exits is restarted with the back-off,
// always. Once the pod is initialized only the sidecars are kept running,
// unless done: the app containers are over for good, and the sidecars
// with them. It is pure: the caller acts on the plan.
func planInit(pod *corev1.Pod, byName map[string]*runtimeapi.Container, states map[string]cri.State, started func(name, id string) bool, done bool) initPlan {
	inits := pod.Spec.InitContainers
	if initialized(pod, byName) {
		plan := initPlan{initDone: true}
		if done {
			return plan
		}
		for i := range inits {
			c := &inits[i]
			if !isSidecar(c) {
				continue
			}
			// A missing one was removed (by hand, or its sandbox's
			// runtime lost it): it starts over.
			switch cur, s := byName[c.Name], states[c.Name]; {
			case cur == nil:
				plan.steps = append(plan.steps, initStep{i, opStart})
			case s.Phase == cri.PhaseCreated:
				plan.steps = append(plan.steps, initStep{i, opStartCreated})
			case s.Phase == cri.PhaseUnknown:
				plan.steps = append(plan.steps, initStep{i, opReplaceUnknown})
			case s.Phase == cri.PhaseExited:
				plan.steps = append(plan.steps, initStep{i, opRestart})
			}
		}
		return plan
	}
	// Before initialization only the last init container that has a
	// container matters: those before it did their part (an earlier
	// sidecar that exits meanwhile is restarted once the pod is
	// initialized, as the kubelet's).
	last := -1
	for i := range inits {
		if _, ok := byName[inits[i].Name]; ok {
			last = i
		}
	}
	if last < 0 {
		if len(inits) == 0 {
			return initPlan{initDone: true}
		}
		return initPlan{steps: []initStep{{0, opStart}}}
	}
	next := initPlan{initDone: true}
	if last < len(inits)-1 {
		next = initPlan{steps: []initStep{{last + 1, opStart}}}
	}
	c, cur, s := &inits[last], byName[inits[last].Name], states[inits[last].Name]
	switch {
	case s.Phase == cri.PhaseCreated:
		return initPlan{steps: []initStep{{last, opStartCreated}}}
	case s.Phase == cri.PhaseUnknown:
		return initPlan{steps: []initStep{{last, opReplaceUnknown}}}
	case isSidecar(c) && s.Phase == cri.PhaseRunning:
		if !started(c.Name, cur.Id) {
			return initPlan{} // its startupProbe decides; a failure kills it (killUnhealthy)
		}
		return next
	case isSidecar(c) && s.Phase == cri.PhaseExited:
		return initPlan{steps: []initStep{{last, opRestart}}}
	case s.Phase != cri.PhaseExited:
		return initPlan{} // running: wait for it
	case s.ExitCode == 0:
		return next
	case pod.Spec.RestartPolicy == corev1.RestartPolicyNever:
		return initPlan{failed: true}
	}
	return initPlan{steps: []initStep{{last, opRestart}}}
}

// syncInitContainers plans the init containers' step (planInit) and
// carries it out, every step even when one fails (each container's
// failure is its own). It reports whether the pod is initialized, whether
// it failed for good, and the steps' errors.
func (m *Manager) syncInitContainers(ctx context.Context, st *podState, byName map[string]*runtimeapi.Container, states map[string]cri.State, done bool) (initDone, failed bool, errs []error) {
	pod := st.pod
	started := func(name, id string) bool { return m.probes.Started(pod.UID, name, id) }
	plan := planInit(pod, byName, states, started, done)
	for _, step := range plan.steps {
		c := &pod.Spec.InitContainers[step.index]
		cur := byName[c.Name]
		var err error
		switch step.op {
		case opStart:
			err = m.startContainer(ctx, st, c, 0)
		case opStartCreated:
			err = m.startCreated(ctx, st, cur)
		case opRestart:
			err = m.restart(ctx, st, c, cur, states[c.Name])
		case opReplaceUnknown:
			err = m.replaceUnknown(ctx, st, c, cur)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return plan.initDone, plan.failed, errs
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
			pod, ip, spec := m.containerSpec(c)
			stops = append(stops, func() {
				if err := m.stopContainer(ctx, pod, ip, spec, c.Id, left); err != nil {
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
		if c.GetLabels()[cri.PodUIDLabel] != "" {
			pod, _, _ := m.containerSpec(c)
			return pod
		}
	}
	return nil
}
