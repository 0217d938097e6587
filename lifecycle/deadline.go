package lifecycle

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The pod status of a pod past its activeDeadlineSeconds, as the kubelet's
// activeDeadlineHandler writes it (pkg/kubelet/active_deadline.go).
const (
	ReasonDeadlineExceeded  = "DeadlineExceeded"
	MessageDeadlineExceeded = "Pod was active on the node longer than the specified deadline"
)

// activeDeadline is when pod's activeDeadlineSeconds runs out, counted
// from start (its status.startTime: when this node took the pod); ok is
// false for a pod without one.
func activeDeadline(pod *corev1.Pod, start time.Time) (deadline time.Time, ok bool) {
	d := pod.Spec.ActiveDeadlineSeconds
	if d == nil {
		return time.Time{}, false
	}
	return start.Add(time.Duration(*d) * time.Second), true
}

// endPastDeadline ends a pod whose active deadline has passed, as the
// kubelet does: it becomes Failed, reason DeadlineExceeded, its containers
// are stopped with the pod's grace period by syncEvicted and it is never
// started again (the record is kept as an eviction's, so a restarted
// nodeguard does not start it either). A pod that already finished
// (Succeeded or Failed) is left as it is, as by the kubelet, which checks
// only pods it still syncs. It reports whether it ended the pod.
func (m *Manager) endPastDeadline(st *podState) bool {
	now := m.now()
	m.mu.Lock()
	deadline, ok := activeDeadline(st.pod, st.created)
	phase := st.status.Phase
	if !ok || now.Before(deadline) || st.evicted != nil || st.deleting ||
		phase == corev1.PodSucceeded || phase == corev1.PodFailed {
		m.mu.Unlock()
		return false
	}
	ev := &evictionRecord{Reason: ReasonDeadlineExceeded, Message: MessageDeadlineExceeded, Grace: grace(st.pod), At: now}
	st.evicted = ev
	st.status.Phase = corev1.PodFailed
	st.status.Reason, st.status.Message = ev.Reason, ev.Message
	pod := st.pod
	rec := *ev // a hard eviction may change st.evicted's Grace meanwhile
	m.mu.Unlock()
	if err := m.recordEviction(pod.UID, &rec); err != nil {
		m.log.Warn("record the end of a pod past its deadline", "pod", key(pod), "err", err)
	}
	m.log.Info("pod active deadline exceeded", "pod", key(pod),
		"active_deadline_seconds", *pod.Spec.ActiveDeadlineSeconds, "started", st.created, "grace", ev.Grace)
	return true
}

// untilDeadline is how long until pod's active deadline, for the worker's
// next sync; ok is false without one or once it has passed.
func untilDeadline(st *podState, now time.Time) (time.Duration, bool) {
	deadline, ok := activeDeadline(st.pod, st.created)
	if !ok || !now.Before(deadline) {
		return 0, false
	}
	return deadline.Sub(now), true
}
