// A pod's containers: init containers in order (sidecars.go), then the app
// containers, each created, started and restarted with the kubelet's
// back-off.

package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/qos"
)

type containerNotFound struct{}

func (containerNotFound) Error() string        { return "container not found" }
func (containerNotFound) Is(target error) bool { return target == ErrNotFound }

// latest returns, per container name, the newest attempt.
func latest(ctrs []*runtimeapi.Container) map[string]*runtimeapi.Container {
	out := map[string]*runtimeapi.Container{}
	for _, c := range ctrs {
		n := c.GetMetadata().GetName()
		if cur, ok := out[n]; !ok || c.GetMetadata().GetAttempt() > cur.GetMetadata().GetAttempt() {
			out[n] = c
		}
	}
	return out
}

// previous returns, per container name, the attempt before the newest
// one the runtime still has (container GC keeps it: gc.go).
func previous(ctrs []*runtimeapi.Container) map[string]*runtimeapi.Container {
	newest := latest(ctrs)
	out := map[string]*runtimeapi.Container{}
	for _, c := range ctrs {
		n := c.GetMetadata().GetName()
		if c == newest[n] {
			continue
		}
		if cur, ok := out[n]; !ok || c.GetMetadata().GetAttempt() > cur.GetMetadata().GetAttempt() {
			out[n] = c
		}
	}
	return out
}

func (m *Manager) syncContainers(ctx context.Context, st *podState) error {
	pod := st.pod
	cctx, cancel := call(ctx)
	ctrs, err := m.cfg.Runtime.ListContainers(cctx, st.sandboxID, nil)
	cancel()
	if err != nil {
		return err
	}
	byName := latest(ctrs)
	states := map[string]cri.State{}
	// seen: the statuses just read, by container ID, for updateStatus
	// to reuse (statusFor).
	seen := make(map[string]*runtimeapi.ContainerStatus, len(byName))
	for name, c := range byName {
		cctx, cancel := call(ctx)
		s, err := m.cfg.Runtime.ContainerStatus(cctx, c.Id)
		cancel()
		if err != nil {
			return err
		}
		states[name] = cri.ContainerState(s)
		seen[c.Id] = s
	}
	m.observeContainers(ctx, st, byName, states)
	if m.killUnhealthy(ctx, st, byName, states) {
		st.poke() // restarted by the next sync, with the back-off
	}
	// Each container's failure to start is its own, as the kubelet's
	// SyncPod starts every container it can and reports each result: a
	// container refused (runAsNonRoot, a missing image, a failed
	// postStart) waits with its reason while the others run. Init
	// containers (sidecars.go) still run one after another.
	done := regularDone(pod, byName, states)
	initDone, failed, errs := m.syncInitContainers(ctx, st, byName, states, done)
	if initDone && !failed {
		for i := range pod.Spec.Containers {
			c := &pod.Spec.Containers[i]
			cur, have := byName[c.Name]
			if !have {
				if err := m.startContainer(ctx, st, c, 0); err != nil {
					errs = append(errs, err)
				}
				continue
			}
			s := states[c.Name]
			if s.Phase == cri.PhaseCreated {
				if err := m.startCreated(ctx, st, cur); err != nil {
					errs = append(errs, err)
				}
				continue
			}
			if s.Phase == cri.PhaseUnknown {
				if err := m.replaceUnknown(ctx, st, c, cur); err != nil {
					errs = append(errs, err)
				}
				continue
			}
			if s.Phase != cri.PhaseExited {
				continue
			}
			switch pod.Spec.RestartPolicy {
			case corev1.RestartPolicyNever:
				continue
			case corev1.RestartPolicyOnFailure:
				if s.ExitCode == 0 {
					continue
				}
			}
			if err := m.restart(ctx, st, c, cur, s); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if (done || failed) && m.stopSidecars(ctx, st, byName, states) {
		st.poke() // their status, once they are gone
	}
	// Fresh view for the status.
	cctx, cancel = call(ctx)
	ctrs, err = m.cfg.Runtime.ListContainers(cctx, st.sandboxID, nil)
	cancel()
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	m.updateStatus(ctx, st, ctrs, seen, initDone, failed, false)
	m.recordContainerErrors(st, errs)
	m.gc(ctx, st.parent, ctrs)
	return nil
}

// Waiting reasons of a container that could not be created or started,
// the kubelet's (pkg/kubelet/container/sync_result.go).
const (
	ReasonCreateContainerError = "CreateContainerError"
	ReasonRunContainerError    = "RunContainerError"
)

// containerError is the error of one container that could not start:
// its waiting reason (a Reason* constant) and the container.
func containerError(err error) (*imageError, bool) {
	if ie, ok := errors.AsType[*imageError](err); ok {
		return ie, true
	}
	if ce, ok := errors.AsType[*cri.ConfigError](err); ok {
		// The kubelet's CreateContainerConfigError: retried at the
		// next sync, the container waiting with the cause's message.
		return &imageError{container: ce.Container, reason: cri.ReasonCreateContainerConfigError, err: ce.Err}, true
	}
	return nil, false
}

// recordContainerErrors puts this sync's container errors into the status
// updateStatus just made: each container waits with its reason and
// message (after its last termination, if any); the pod's reason and
// message are the first error's, as before a container's failure stopped
// the sync. Each is logged when it changes, not at every sync.
func (m *Manager) recordContainerErrors(st *podState, errs []error) {
	seen := make(map[string]string, len(errs))
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, err := range errs {
		reason, name, msg := "SyncFailed", "", err.Error()
		if ie, ok := containerError(err); ok {
			reason, name, msg = ie.reason, ie.container, ie.err.Error()
		}
		if st.ctrErrs[name] != reason+": "+msg {
			m.log.Warn("container cannot start", "pod", key(st.pod), "container", name, "reason", reason, "err", msg)
		}
		seen[name] = reason + ": " + msg
		if st.evicted != nil {
			continue
		}
		if i == 0 {
			st.lastErr = err.Error()
			st.status.Reason, st.status.Message = reason, err.Error()
			if st.status.Phase == "" {
				st.status.Phase = corev1.PodPending
			}
		}
		if name != "" {
			setWaiting(st, name, reason, msg)
		}
	}
	st.ctrErrs = seen
}

// setWaiting makes container name of st's status wait with reason and
// message; the state it had, if it had terminated, becomes its last.
// The caller holds m.mu.
func setWaiting(st *podState, name, reason, msg string) {
	statuses := &st.status.ContainerStatuses
	for _, c := range st.pod.Spec.InitContainers {
		if c.Name == name {
			statuses = &st.status.InitContainerStatuses
		}
	}
	waiting := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}
	for i := range *statuses {
		cs := &(*statuses)[i]
		if cs.Name == name {
			if cs.State.Terminated != nil {
				cs.LastTerminationState = cs.State
			}
			cs.State = waiting
			return
		}
	}
	*statuses = append(*statuses, corev1.ContainerStatus{Name: name, Image: imageOf(st.pod, name), State: waiting})
}

// startCreated starts a container that was created but never started: a
// nodeguard killed between CreateContainer and StartContainer leaves one
// behind. If it cannot start, it is removed, so that the next sync makes
// the attempt again.
func (m *Manager) startCreated(ctx context.Context, st *podState, c *runtimeapi.Container) error {
	cctx, cancel := call(ctx)
	defer cancel()
	if err := m.cfg.Runtime.StartContainer(cctx, c.Id); err != nil {
		m.log.Warn("start a created container; removing it", "pod", key(st.pod), "container", c.GetMetadata().GetName(), "err", err)
		return m.removeContainer(ctx, st.parent, c.Id)
	}
	m.log.Info("created container started", "pod", key(st.pod), "container", c.GetMetadata().GetName())
	return nil
}

// replaceUnknown ends a container whose state its runtime does not know
// and starts its next attempt, whatever the pod's restartPolicy, as the
// kubelet's computePodActions does. containerd reports
// CONTAINER_UNKNOWN for a container whose task it could not load when it
// restarted (killed while the container was being started, say); such a
// container may be running still, so it is stopped first (its preStop
// hook, then TERM within the pod's grace period), lest two instances of
// it run, and removed, so that the next attempt is the one the sync sees.
// Left alone it would wait as ContainerCreating for ever.
func (m *Manager) replaceUnknown(ctx context.Context, st *podState, c *corev1.Container, cur *runtimeapi.Container) error {
	m.log.Warn("container in an unknown state; stopping it before its next attempt", "pod", key(st.pod), "container", c.Name, "id", cur.Id)
	m.event(st.pod, c.Name, corev1.EventTypeNormal, ReasonKilling,
		fmt.Sprintf("Container %s is in %q state, try killing it before restart", c.Name, "unknown"))
	if err := m.stopContainer(ctx, st.pod, st.ip, c, cur.Id, grace(st.pod)); err != nil {
		return fmt.Errorf("container %s in an unknown state: stop it: %w", c.Name, err)
	}
	if err := m.removeContainer(ctx, st.parent, cur.Id); err != nil {
		return fmt.Errorf("container %s in an unknown state: remove it: %w", c.Name, err)
	}
	return m.startContainer(ctx, st, c, cur.GetMetadata().GetAttempt()+1)
}

// restart starts the next attempt of an exited container once its
// back-off has passed.
func (m *Manager) restart(ctx context.Context, st *podState, c *corev1.Container, cur *runtimeapi.Container, s cri.State) error {
	now := m.now()
	b := st.backoff[c.Name]
	if b == nil {
		// The first exit this agent sees is restarted at once, as the
		// kubelet does (its back-off entry is made by that restart): the
		// back-off is for a container that keeps failing. A nodeguard
		// killed mid-start leaves a container that failed to start
		// through no fault of its own, and its restart should not wait.
		st.backoff[c.Name] = &backoff{}
		m.log.Info("container restarting", "pod", key(st.pod), "container", c.Name, "exit_code", s.ExitCode, "reason", s.Reason)
		return m.startContainer(ctx, st, c, cur.GetMetadata().GetAttempt()+1)
	}
	if b.until.IsZero() {
		// A container that ran long enough starts over (the kubelet
		// resets after twice the maximum).
		if !s.StartedAt.IsZero() && s.FinishedAt.Sub(s.StartedAt) > 2*m.cfg.BackoffMax {
			b.delay = 0
		}
		switch {
		case b.delay == 0:
			b.delay = m.cfg.BackoffInitial
		default:
			b.delay = min(2*b.delay, m.cfg.BackoffMax)
		}
		b.until = s.FinishedAt.Add(b.delay)
		if s.FinishedAt.IsZero() {
			b.until = now.Add(b.delay)
		}
		m.log.Info("container back-off", "pod", key(st.pod), "container", c.Name, "exit_code", s.ExitCode, "reason", s.Reason, "delay", b.delay)
	}
	if now.Before(b.until) {
		m.mu.Lock()
		if st.evicted == nil {
			st.status.Reason = "CrashLoopBackOff"
		}
		m.mu.Unlock()
		return nil
	}
	b.until = time.Time{}
	return m.startContainer(ctx, st, c, cur.GetMetadata().GetAttempt()+1)
}

func (m *Manager) startContainer(ctx context.Context, st *podState, c *corev1.Container, attempt uint32) error {
	if m.isEvicted(st) {
		return nil // the next sync tears it down
	}
	image, err := m.ensureImage(ctx, st, c) // its own bounds: a pull outlasts callTimeout
	if err != nil {
		return err
	}
	vimages, err := m.ensureImageVolumes(ctx, st, c) // bounded as ensureImage
	if err != nil {
		return err
	}
	cctx, cancel := call(ctx)
	defer cancel()
	adj, err := qos.OOMScoreAdj(st.pod, c, m.cfg.MemoryCapacity)
	if err != nil {
		return err
	}
	if clamped, did := qos.ClampForCapability(adj, m.cfg.HasCapSysResource, m.cfg.MinOOMScoreAdj); did {
		m.clampedOnce.Do(func() {
			m.log.Warn("oom_score_adj clamped: no CAP_SYS_RESOURCE", "wanted", adj, "used", clamped, "min_allowed", m.cfg.MinOOMScoreAdj)
		})
		adj = clamped
	}
	if err := m.verifyRunAsNonRoot(cctx, st, c, image); err != nil {
		return err
	}
	ms, err := m.containerMounts(st, c)
	if err != nil {
		return err
	}
	if err := resolveImageMounts(c, ms, vimages); err != nil {
		return err
	}
	devs, err := m.containerDevices(st, c)
	if err != nil {
		return err
	}
	if hm, err := m.hostsMount(st, c); err != nil {
		return err
	} else if hm != nil {
		ms = append(ms, hm)
	}
	opts := cri.ContainerOptions{
		Image: image, Attempt: attempt, OOMScoreAdj: int64(adj), PodIP: st.ip,
		CgroupV2: m.cfg.CgroupV2, EnforceCPULimits: true, Mounts: ms, Devices: devs,
		SeccompProfileRoot: cri.SeccompProfileRoot(m.cfg.RootDir),
		Node:               m.cfg.Node,
	}
	if m.cfg.Volumes != nil {
		opts.EnvSources = m.cfg.Volumes
	}
	cfg, err := cri.ContainerConfig(st.pod, c, opts)
	if err != nil {
		return err
	}
	id, err := m.cfg.Runtime.CreateContainer(cctx, st.sandboxID, cfg, st.sandboxCfg)
	if err != nil {
		return &imageError{container: c.Name, reason: ReasonCreateContainerError, err: err}
	}
	// The kubelet's events of a container start, in its words.
	m.event(st.pod, c.Name, corev1.EventTypeNormal, ReasonCreated, "Created container: "+c.Name)
	if err := m.cfg.Runtime.StartContainer(cctx, id); err != nil {
		return &imageError{container: c.Name, reason: ReasonRunContainerError, err: err}
	}
	m.event(st.pod, c.Name, corev1.EventTypeNormal, ReasonStarted, "Started container "+c.Name)
	m.log.Info("container started", "pod", key(st.pod), "container", c.Name, "attempt", attempt, "oom_score_adj", adj)
	if c.Lifecycle != nil && c.Lifecycle.PostStart != nil {
		// Outside cctx: the hook has its own bound (hooks.go).
		return m.postStart(ctx, st, c, id)
	}
	return nil
}

// verifyRunAsNonRoot refuses to create c when runAsNonRoot says it must not
// run as root and it would (cri.VerifyRunAsNonRoot, on the user of the
// resolved image). The refusal is the container's waiting reason
// CreateContainerConfigError with the kubelet's message; the next sync
// checks again, as the kubelet's.
func (m *Manager) verifyRunAsNonRoot(ctx context.Context, st *podState, c *corev1.Container, image string) error {
	var img *runtimeapi.Image
	if cri.NeedsImageUser(st.pod, c) {
		var err error
		if img, err = m.cfg.Runtime.ImageStatus(ctx, image); err != nil {
			return fmt.Errorf("container %s: image user for runAsNonRoot: %w", c.Name, err)
		}
	}
	if err := cri.VerifyRunAsNonRoot(st.pod, c, img); err != nil {
		return &imageError{container: c.Name, reason: ReasonCreateContainerConfigError, err: err}
	}
	return nil
}
