// A pod's sandbox: created, adopted after a restart, and its config.

package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

func (m *Manager) logDir(p *corev1.Pod) string {
	return filepath.Join(m.cfg.RootDir, "logs", p.Namespace+"_"+p.Name+"_"+string(p.UID))
}

// checkAdopted checks a running sandbox found for st's pod against the pod
// cgroup the configuration makes, and applies the pod's limits again.
func (m *Manager) checkAdopted(ctx context.Context, st *podState, sb *runtimeapi.PodSandbox) error {
	had := sb.GetAnnotations()[AnnotationCgroupParent]
	want, err := m.cfg.Cgroups.Parent(st.pod)
	if err != nil {
		return err
	}
	if !m.cfg.Cgroups.SameCgroup(had, want) {
		return fmt.Errorf("it was made in %q, this configuration's pod cgroup is %q", had, want)
	}
	if err := m.cfg.Cgroups.CheckSandbox(want, sb.Id); err != nil {
		return err
	}
	if _, err := m.cfg.Cgroups.Ensure(ctx, st.pod); err != nil {
		return fmt.Errorf("apply its limits again: %w", err)
	}
	return nil
}

// syncPod drives one desired pod one step towards its spec.
func (m *Manager) syncPod(ctx context.Context, st *podState, sbs []*runtimeapi.PodSandbox) {
	pod := st.pod
	// Adopt the newest ready sandbox; remove the others.
	var current *runtimeapi.PodSandbox
	for _, sb := range sbs {
		if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY && (current == nil || sb.CreatedAt > current.CreatedAt) {
			current = sb
		}
	}
	for _, sb := range sbs {
		if current == nil || sb.Id != current.Id {
			m.teardownSandbox(ctx, sb.Id, sb.GetAnnotations()[AnnotationCgroupParent], orphanGrace, false)
		}
	}
	// Volumes before the sandbox, as the kubelet mounts before it
	// creates: a pod whose volume cannot be set up gets no sandbox,
	// and the kubelet's reason for it (FailedMount, its event's: an NFS
	// server that does not answer, a missing configMap).
	if err := m.setupVolumes(ctx, st); err != nil {
		// Held with the reason in its status and, when the reason is new,
		// a Warning event, as the kubelet's volume manager (a ConfigMap
		// that appears later is mounted at a next sync).
		if m.setError(st, "FailedMount", err) {
			m.event(st.pod, "", corev1.EventTypeWarning, "FailedMount", err.Error())
		}
		return
	}
	if current != nil && st.sandboxID != current.Id && m.cfg.Network != nil && !pod.Spec.HostNetwork {
		// Adopting after a restart: a sandbox whose plumbing is gone (the
		// runtime crashed with it) is replaced, not trusted.
		cctx, cancel := call(ctx)
		s, err := m.cfg.Runtime.PodSandboxStatus(cctx, current.Id)
		cancel()
		if err == nil {
			err = m.verifyNetwork(ctx, pod, s)
		}
		if err != nil {
			m.log.Warn("adopted sandbox's network is broken; replacing it", "pod", key(pod), "sandbox", current.Id, "err", err)
			m.teardownSandbox(ctx, current.Id, current.GetAnnotations()[AnnotationCgroupParent], orphanGrace, false)
			current = nil
		}
	}
	if current != nil && st.sandboxID != current.Id {
		// Adopting: the sandbox must sit in the pod cgroup this
		// configuration makes (a driver or root changed since, an
		// upgrade from a relative root) and be placed as the driver
		// places it; otherwise it is replaced, since its limits,
		// statistics and kill would miss it. Kept, its limits are
		// applied again (Ensure is idempotent).
		if err := m.checkAdopted(ctx, st, current); err != nil {
			m.log.Warn("adopted sandbox is not in its pod cgroup; replacing it", "pod", key(pod), "sandbox", current.Id, "err", err)
			m.teardownSandbox(ctx, current.Id, current.GetAnnotations()[AnnotationCgroupParent], orphanGrace, false)
			current = nil
		}
	}
	if current == nil {
		if err := m.createSandbox(ctx, st); err != nil {
			m.setError(st, "SandboxFailed", err)
			return
		}
	} else if st.sandboxID != current.Id {
		parent := current.GetAnnotations()[AnnotationCgroupParent]
		m.mu.Lock()
		st.sandboxID, st.parent = current.Id, parent
		// The pod started with its sandbox, before this nodeguard: its
		// startTime, and so its activeDeadlineSeconds, count from then.
		if c := time.Unix(0, current.CreatedAt); current.CreatedAt > 0 && c.Before(st.created) {
			st.created = c
		}
		m.mu.Unlock()
		st.sandboxCfg = m.sandboxConfig(st)
		m.log.Info("pod adopted", "pod", key(pod), "sandbox", current.Id)
	}
	if st.ip == "" {
		cctx, cancel := call(ctx)
		if s, err := m.cfg.Runtime.PodSandboxStatus(cctx, st.sandboxID); err == nil {
			m.mu.Lock()
			st.ip = s.IP
			m.mu.Unlock()
		}
		cancel()
	}
	if err := m.syncContainers(ctx, st); err != nil {
		if ie, ok := errors.AsType[*imageError](err); ok {
			m.setImageError(st, ie)
			return
		}
		if ce, ok := errors.AsType[*cri.ConfigError](err); ok {
			// The kubelet's CreateContainerConfigError: retried at the
			// next sync, the container waiting with the cause's message.
			m.setImageError(st, &imageError{container: ce.Container, reason: cri.ReasonCreateContainerConfigError, err: ce.Err})
			return
		}
		m.setError(st, "SyncFailed", err)
	}
}

// setError puts reason and err in st's status (not an evicted pod's) and
// logs err when it is not the last one; it reports whether it was new.
func (m *Manager) setError(st *podState, reason string, err error) (changed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	msg := err.Error()
	if st.evicted != nil {
		return false
	}
	if changed = st.lastErr != msg; changed {
		m.log.Warn("pod sync failed", "pod", key(st.pod), "reason", reason, "err", err)
	}
	st.lastErr = msg
	st.status.Reason, st.status.Message = reason, msg
	return changed
}

func (m *Manager) sandboxConfig(st *podState) *runtimeapi.PodSandboxConfig {
	cfg := cri.SandboxConfig(st.pod, cri.SandboxOptions{CgroupParent: st.parent, LogDir: m.logDir(st.pod), DNS: m.cfg.DNS})
	if cfg.Annotations == nil {
		cfg.Annotations = map[string]string{}
	}
	cfg.Annotations[AnnotationCgroupParent] = st.parent
	return cfg
}

func (m *Manager) createSandbox(ctx context.Context, st *podState) (retErr error) {
	if m.isEvicted(st) {
		return nil
	}
	parent, err := m.cfg.Cgroups.Ensure(ctx, st.pod)
	if err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			_ = m.cfg.Cgroups.Remove(ctx, parent)
		}
	}()
	m.mu.Lock()
	st.parent = parent
	m.mu.Unlock()
	if err := os.MkdirAll(m.logDir(st.pod), 0o750); err != nil {
		return fmt.Errorf("create log dir: %w", err)
	}
	cfg := m.sandboxConfig(st)
	cctx, cancel := context.WithTimeout(ctx, sandboxTimeout)
	defer cancel()
	m.createMu.RLock()
	id, err := m.cfg.Runtime.RunPodSandbox(cctx, cfg)
	m.createMu.RUnlock()
	if err != nil {
		return m.cfg.Cgroups.ExplainRunError(err)
	}
	if err := m.cfg.Cgroups.CheckSandbox(parent, id); err != nil {
		// The runtime put it elsewhere: the limits, statistics, tripwire
		// and kill would all miss its processes. Never keep it so.
		m.teardownSandbox(ctx, id, parent, orphanGrace, false)
		return fmt.Errorf("sandbox %s: %w", id, err)
	}
	if m.cfg.Network != nil && !st.pod.Spec.HostNetwork {
		s, err := m.cfg.Runtime.PodSandboxStatus(cctx, id)
		if err == nil {
			err = m.verifyNetwork(ctx, st.pod, s)
		}
		if err != nil {
			// The runtime said yes, the kernel says no: a sandbox without
			// its network is torn down (its cgroup with it) and made again.
			m.teardownSandbox(ctx, id, parent, orphanGrace, false)
			return fmt.Errorf("sandbox %s: %w", id, err)
		}
	}
	m.mu.Lock()
	st.sandboxID, st.sandboxCfg, st.ip = id, cfg, ""
	m.mu.Unlock()
	m.log.Info("sandbox started", "pod", key(st.pod), "sandbox", id, "cgroup", parent)
	return nil
}
