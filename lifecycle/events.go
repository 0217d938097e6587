// Pod events, as the kubelet records them (a Kubernetes Event's type,
// reason and message), for the local API's event log.

package lifecycle

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// EventRecorder keeps the Manager's events; *api.EventLog is one.
type EventRecorder interface {
	Append(at time.Time, kind string, obj any)
}

// EventKindPod is the kind of a PodEvent in the event log.
const EventKindPod = "pod"

// PodEvent is what the kubelet would record as an Event of a pod's
// container: its type (Normal or Warning), reason and message.
type PodEvent struct {
	Pod       string    `json:"pod"`
	UID       types.UID `json:"uid"`
	Container string    `json:"container,omitempty"`
	Type      string    `json:"type"`
	Reason    string    `json:"reason"`
	Message   string    `json:"message"`
}

// event records a PodEvent (Config.Events, when set) and logs it: a
// warning as a warning.
func (m *Manager) event(pod *corev1.Pod, container, typ, reason, msg string) {
	log := m.log.Info
	if typ == corev1.EventTypeWarning {
		log = m.log.Warn
	}
	log("pod event", "pod", key(pod), "container", container, "type", typ, "reason", reason, "message", msg)
	if m.cfg.Events != nil {
		m.cfg.Events.Append(m.now(), EventKindPod, PodEvent{
			Pod: key(pod), UID: pod.UID, Container: container, Type: typ, Reason: reason, Message: msg,
		})
	}
}
