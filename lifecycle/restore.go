// Re-admission at restart: the pods found at start (the persisted API
// pods, the manifest directory's) are admitted again one at a time, and
// one that no longer validates or fits the node never stops the agent.
//
// This follows the kubelet: at a restart every pod of its sources goes
// through HandlePodAdditions again, where canAdmitPod's refusal (the
// NodeAffinity predicate, an admit handler) makes rejectPod set the pod
// Failed with the handler's reason and message and record a Warning event
// of that reason; the pod is not synced, so the containers it still runs
// are killed by the pod workers (HandlePodCleanups), and the kubelet goes
// on with the other pods. Unlike the kubelet nodeguard keeps the rejected
// pod's volumes (the kubelet unmounts a terminated pod's): its record is
// kept, so once the configuration that rejects it is fixed, a restart
// admits it again with its emptyDir data; deleting it removes both.

package lifecycle

import (
	"errors"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/evictionapi"
)

// ReasonUnsupportedPodSpec is the status reason of a pod rejected at its
// re-admission because it no longer validates on this node (the
// configuration narrowed: imagePull, allowPrivileged, the hostPath
// allowlist), as node mode reports such a pod to the API server.
const ReasonUnsupportedPodSpec = "UnsupportedPodSpec"

// reasonUnexpectedAdmission is the kubelet's reason of a refusal that
// names none.
const reasonUnexpectedAdmission = "UnexpectedAdmissionError"

// restore admits p of source found at start. A pod that does not validate
// or fit is added all the same, ended (Failed with the kubelet's reason
// and message, its containers stopped, its volumes kept) and told as a
// Warning event; only an error that is neither (none today) is returned.
func (m *Manager) restore(p *corev1.Pod, source string) (*corev1.Pod, error) {
	q, err := m.admit(p, source)
	if err == nil {
		m.add([]*corev1.Pod{q}, source, nil)
		return q, nil
	}
	if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrRejected) {
		return nil, err
	}
	reason, msg := rejection(err)
	m.log.Warn("pod rejected at its re-admission: kept Failed, its containers stopped, its volumes and record kept",
		"pod", key(q), "source", source, "reason", reason, "err", err)
	m.add([]*corev1.Pod{q}, source, &evictionRecord{Reason: reason, Message: msg, Grace: grace(q), At: m.now(), rejected: true})
	m.event(q, "", corev1.EventTypeWarning, reason, msg)
	return q, nil
}

// rejection is the kubelet's pod status reason and message of a refused
// pod: NodeAffinity with the predicate's message for a nodeSelector the
// node does not match, the eviction manager's (Evicted) for its
// admission, the refusal's own Reason when it has one.
func rejection(err error) (reason, message string) {
	var na *nodeAffinityError
	var ae *evictionapi.AdmitError
	var rr interface{ Reason() string }
	switch {
	case errors.As(err, &na):
		return ReasonNodeAffinity, MessageNodeAffinity + ": " + na.detail
	case errors.As(err, &ae):
		return evictionapi.AdmitReason, ae.Error()
	case errors.As(err, &rr):
		return rr.Reason(), err.Error()
	case errors.Is(err, ErrInvalid):
		return ReasonUnsupportedPodSpec, err.Error()
	}
	return reasonUnexpectedAdmission, err.Error()
}
