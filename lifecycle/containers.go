// A pod's containers: init containers in order, then the app containers,
// each created, started and restarted with the kubelet's back-off.

package lifecycle

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/lifecycle/qos"
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
	for name, c := range byName {
		cctx, cancel := call(ctx)
		s, err := m.cfg.Runtime.ContainerStatus(cctx, c.Id)
		cancel()
		if err != nil {
			return err
		}
		states[name] = cri.ContainerState(s)
	}
	m.observeContainers(ctx, st, byName, states)
	if m.killUnhealthy(ctx, st, byName, states) {
		st.poke() // restarted by the next sync, with the back-off
	}
	failed := false
	initDone := true
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		cur, have := byName[c.Name]
		if !have {
			initDone = false
			if err := m.startContainer(ctx, st, c, 0); err != nil {
				return err
			}
			break
		}
		s := states[c.Name]
		if s.Phase == cri.PhaseCreated {
			initDone = false
			if err := m.startCreated(ctx, st, cur); err != nil {
				return err
			}
			break
		}
		if s.Phase != cri.PhaseExited {
			initDone = false
			break
		}
		if s.ExitCode == 0 {
			continue
		}
		initDone = false
		if pod.Spec.RestartPolicy == corev1.RestartPolicyNever {
			failed = true
			break
		}
		if err := m.restart(ctx, st, c, cur, s); err != nil {
			return err
		}
		break
	}
	if initDone && !failed {
		for i := range pod.Spec.Containers {
			c := &pod.Spec.Containers[i]
			cur, have := byName[c.Name]
			if !have {
				if err := m.startContainer(ctx, st, c, 0); err != nil {
					return err
				}
				continue
			}
			s := states[c.Name]
			if s.Phase == cri.PhaseCreated {
				if err := m.startCreated(ctx, st, cur); err != nil {
					return err
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
				return err
			}
		}
	}
	// Fresh view for the status.
	cctx, cancel = call(ctx)
	ctrs, err = m.cfg.Runtime.ListContainers(cctx, st.sandboxID, nil)
	cancel()
	if err != nil {
		return err
	}
	m.updateStatus(ctx, st, latest(ctrs), initDone, failed)
	m.gc(ctx, st.parent, ctrs)
	return nil
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
	cctx, cancel := call(ctx)
	defer cancel()
	image, err := m.ensureImage(cctx, st, c)
	if err != nil {
		return err
	}
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
		return err
	}
	if err := m.cfg.Runtime.StartContainer(cctx, id); err != nil {
		return err
	}
	m.log.Info("container started", "pod", key(st.pod), "container", c.Name, "attempt", attempt, "oom_score_adj", adj)
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
