// Pod status synthesis from the runtime's view, as the kubelet's
// generateAPIPodStatus.

package lifecycle

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// updateStatus makes the pod's status from byName, the runtime's fresh
// list of its containers, and each one's status: the one in seen (read
// earlier in this sync) when the list still shows that container in the
// state seen had, else asked of the runtime again. A steady pod's sync
// thus asks for each container's status once, not twice.
func (m *Manager) updateStatus(ctx context.Context, st *podState, ctrs []*runtimeapi.Container, seen map[string]*runtimeapi.ContainerStatus, initDone, failed, stopped bool) {
	pod := st.pod
	byName, prev := latest(ctrs), previous(ctrs)
	status := corev1.PodStatus{PodIP: st.ip, StartTime: &metav1.Time{Time: st.created}}
	if st.ip != "" {
		status.PodIPs = []corev1.PodIP{{IP: st.ip}}
	}
	conv := func(c *corev1.Container) corev1.ContainerStatus {
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image}
		ctr, ok := byName[c.Name]
		if !ok {
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
			return cs
		}
		cs.ContainerID = "containerd://" + ctr.Id
		cs.ImageID = ctr.ImageRef
		cs.RestartCount = int32(ctr.GetMetadata().GetAttempt())
		raw, err := m.statusFor(ctx, ctr, seen)
		if err != nil {
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "Unknown", Message: err.Error()}
			return cs
		}
		// The identity the runtime started the container with, where it
		// reports one (the supplemental_groups_policy feature).
		cs.User = cri.ContainerUser(raw)
		s := cri.ContainerState(raw)
		switch s.Phase {
		case cri.PhaseRunning:
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.Time{Time: s.StartedAt}}
			started, ready := m.probeStatus(st, c, ctr.Id, s.StartedAt)
			cs.Ready, cs.Started = ready, ptr(started)
		case cri.PhaseExited:
			cs.State.Terminated = m.terminated(ctx, st, c, ctr.Id, raw)
			if b := st.backoff[c.Name]; b != nil && !b.until.IsZero() {
				cs.LastTerminationState.Terminated = cs.State.Terminated
				cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
					Message: fmt.Sprintf("back-off %s restarting failed container %s", b.delay, c.Name)}}
			}
		default:
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
		}
		if cs.LastTerminationState.Terminated == nil {
			// The attempt before this one, as the kubelet's
			// convertToAPIContainerStatuses: a container restarted at
			// once (a sidecar, a liveness kill, the first crash) has no
			// back-off to carry its last state.
			cs.LastTerminationState.Terminated = m.previousTermination(ctx, st, c, prev[c.Name])
		}
		return cs
	}
	allStarted, anyRunning, allExited, allZero, allReady := true, false, true, true, true
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		cs := conv(c)
		status.InitContainerStatuses = append(status.InitContainerStatuses, cs)
		// A sidecar's readiness counts for ContainersReady and Ready as
		// an app container's (the kubelet's generateContainersReadyCondition);
		// the phase is the app containers' alone.
		if isSidecar(c) && !cs.Ready {
			allReady = false
		}
	}
	for i := range pod.Spec.Containers {
		cs := conv(&pod.Spec.Containers[i])
		status.ContainerStatuses = append(status.ContainerStatuses, cs)
		if cs.ContainerID == "" {
			allStarted = false
		}
		if cs.State.Running != nil {
			anyRunning = true
			allExited = false
		} else if t := cs.State.Terminated; t != nil {
			if t.ExitCode != 0 {
				allZero = false
			}
		} else {
			allExited = false
		}
		if !cs.Ready {
			allReady = false
		}
	}
	switch {
	case failed:
		status.Phase = corev1.PodFailed
	case !initDone || !allStarted:
		status.Phase = corev1.PodPending
	case allExited && pod.Spec.RestartPolicy != corev1.RestartPolicyAlways:
		if allZero {
			status.Phase = corev1.PodSucceeded
		} else if pod.Spec.RestartPolicy == corev1.RestartPolicyNever {
			status.Phase = corev1.PodFailed
		} else {
			status.Phase = corev1.PodRunning
		}
	case anyRunning || allExited:
		status.Phase = corev1.PodRunning
	default:
		status.Phase = corev1.PodPending
	}
	cond := func(t corev1.PodConditionType, ok bool) corev1.PodCondition {
		s := corev1.ConditionFalse
		if ok {
			s = corev1.ConditionTrue
		}
		return corev1.PodCondition{Type: t, Status: s}
	}
	status.Conditions = []corev1.PodCondition{
		cond(corev1.PodScheduled, true),
		cond(corev1.PodInitialized, initDone),
		cond(corev1.ContainersReady, allReady && initDone),
		cond(corev1.PodReady, allReady && initDone),
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if ev := st.evicted; ev != nil {
		if !stopped {
			return // evicted meanwhile: Failed, Evicted stays
		}
		// Its containers stopped (stopped: the caller's afterStop): their
		// terminated states, not ready, and the eviction's phase, reason
		// and message, as the kubelet reports an evicted pod.
		status.Phase, status.Reason, status.Message = corev1.PodFailed, ev.reason(), ev.Message
		for i := range status.Conditions {
			if c := &status.Conditions[i]; c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
				c.Status = corev1.ConditionFalse
			}
		}
		st.status = status
		return
	}
	if st.status.Reason == "CrashLoopBackOff" || st.lastErr == "" {
		status.Reason = ""
	}
	st.lastErr = ""
	st.status = status
}

// terminated is the terminated state of c's exited container id, whose
// status is raw, with the reasons the kubelet gives.
func (m *Manager) terminated(ctx context.Context, st *podState, c *corev1.Container, id string, raw *runtimeapi.ContainerStatus) *corev1.ContainerStateTerminated {
	s := cri.ContainerState(raw)
	reason := s.Reason
	switch {
	case s.OOMKilled:
		reason = "OOMKilled"
	case s.ExitCode == 0:
		reason = "Completed"
	case reason == "" || reason == "OOMKilled":
		reason = "Error"
	}
	t := &corev1.ContainerStateTerminated{ExitCode: s.ExitCode, Reason: reason, Message: s.Message,
		StartedAt: metav1.Time{Time: s.StartedAt}, FinishedAt: metav1.Time{Time: s.FinishedAt}, ContainerID: "containerd://" + id}
	if hf, ok := st.hookFailed[c.Name]; ok && hf.id == id {
		// Killed for its postStart hook (hooks.go): the kubelet says so
		// in an event and its waiting reason only, both soon gone; the
		// terminated state keeps why.
		t.Reason, t.Message = EventFailedPostStartHook, hf.message
	} else if s.Message == "" && s.ExitCode != 0 && c.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError {
		t.Message = fallbackMessage(ctx, raw.GetLogPath())
	}
	return t
}

// lastTermination is a container's previous attempt and how it ended.
type lastTermination struct {
	id string
	t  *corev1.ContainerStateTerminated
}

// previousTermination is how ctr, c's attempt before its newest, ended:
// nil when there is none or it has not exited. It is asked of the
// runtime once per attempt (an exited container's status is final) and
// kept in st.lastTerm.
func (m *Manager) previousTermination(ctx context.Context, st *podState, c *corev1.Container, ctr *runtimeapi.Container) *corev1.ContainerStateTerminated {
	if ctr == nil {
		return nil
	}
	if lt, ok := st.lastTerm[c.Name]; ok && lt.id == ctr.Id {
		return lt.t
	}
	if ctr.GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
		return nil
	}
	cctx, cancel := call(ctx)
	raw, err := m.cfg.Runtime.ContainerStatus(cctx, ctr.Id)
	cancel()
	if err != nil {
		return nil // asked again at the next sync
	}
	t := m.terminated(ctx, st, c, ctr.Id, raw)
	if st.lastTerm == nil {
		st.lastTerm = map[string]lastTermination{}
	}
	st.lastTerm[c.Name] = lastTermination{id: ctr.Id, t: t}
	return t
}

// statusFor returns ctr's status: seen's when it is of the same container
// in the state the list shows now (nothing happened to it since it was
// read), else the runtime's.
func (m *Manager) statusFor(ctx context.Context, ctr *runtimeapi.Container, seen map[string]*runtimeapi.ContainerStatus) (*runtimeapi.ContainerStatus, error) {
	if s, ok := seen[ctr.Id]; ok && s.GetState() == ctr.GetState() {
		return s, nil
	}
	cctx, cancel := call(ctx)
	defer cancel()
	return m.cfg.Runtime.ContainerStatus(cctx, ctr.Id)
}

func ptr[T any](v T) *T { return &v }
