// Pod events: what the kubelet records on a pod's involvedObject through
// its EventRecorder, here appended to the agent's event log (api.EventLog,
// GET /v1/events, `nodeguard events --agent`). Standalone there is no API
// server to post them to; with one, the node-mode issue would.

package lifecycle

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/lifecycle/prober"
)

// EventRecorder keeps events; *api.EventLog is one. Append must not block
// for long: it is called from probe workers and pod syncs.
type EventRecorder interface {
	Append(at time.Time, kind string, obj any)
}

// PodEventKind is the event log's kind of a PodEvent.
const PodEventKind = "pod"

// The kubelet's event reasons used here (pkg/kubelet/events).
const (
	ReasonKilling = "Killing"
)

// PodEvent is one event about a pod or one of its containers, with the
// fields of a Kubernetes Event that a node fills in.
type PodEvent struct {
	// Type is corev1.EventTypeNormal or corev1.EventTypeWarning.
	Type    string `json:"type"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// Namespace, Pod and UID are the involvedObject; FieldPath names the
	// container as the kubelet's references do: spec.containers{name}.
	Namespace string    `json:"namespace"`
	Pod       string    `json:"pod"`
	UID       types.UID `json:"uid"`
	FieldPath string    `json:"fieldPath,omitempty"`
}

// event records a PodEvent about pod's container (none when container is
// ""), when the Manager has a recorder.
func (m *Manager) event(pod *corev1.Pod, container, typ, reason, msg string) {
	if m.cfg.Events == nil {
		return
	}
	e := PodEvent{Type: typ, Reason: reason, Message: msg, Namespace: pod.Namespace, Pod: pod.Name, UID: pod.UID}
	if container != "" {
		e.FieldPath = "spec.containers{" + container + "}"
	}
	m.cfg.Events.Append(m.now(), PodEventKind, e)
}

// onProbeFailed is the prober's OnFailed: every failed or errored run is
// a Warning "Unhealthy" event, as the kubelet's prober records it.
func (m *Manager) onProbeFailed(f prober.Failed) {
	m.event(f.Pod, f.Container, corev1.EventTypeWarning, prober.Reason, f.Message)
}

// killingMessage is the kubelet's message of the Killing event of a
// container that failed its liveness or startup probe
// (kuberuntime's computePodActions).
func killingMessage(pod *corev1.Pod, container string, k prober.Kind) string {
	msg := "Container " + container + " failed liveness probe"
	if k == prober.Startup {
		msg = "Container " + container + " failed startup probe"
	}
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		msg += ", will be restarted"
	}
	return msg
}
