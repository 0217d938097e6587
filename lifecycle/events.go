// Pod events: what the kubelet records on a pod's involvedObject through
// its EventRecorder, here appended to the agent's event log (api.EventLog,
// GET /v1/events, `nodeguard events --agent`). Standalone there is no API
// server to post them to; with one, the node-mode issue would.

package lifecycle

import (
	"sync"
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
	ReasonCreated = "Created"
	ReasonStarted = "Started"
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

// The kubelet's recorder (client-go's EventSourceObjectSpamFilter) lets
// each object burst 25 events, then one every 5 minutes: a container
// failing its readiness probe every second must not push every other
// event (evictions, OOM kills) out of the bounded log.
const (
	eventBurst  = 25
	eventRefill = 5 * time.Minute
)

// eventFilter is that spam filter, per pod.
type eventFilter struct {
	mu      sync.Mutex
	buckets map[types.UID]*eventBucket
	dropped uint64
}

type eventBucket struct {
	tokens float64
	last   time.Time
}

// allow takes a token of uid's bucket at now, if it has one.
func (f *eventFilter) allow(uid types.UID, now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.buckets == nil {
		f.buckets = map[types.UID]*eventBucket{}
	}
	b := f.buckets[uid]
	if b == nil {
		b = &eventBucket{tokens: eventBurst, last: now}
		f.buckets[uid] = b
	}
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(eventBurst, b.tokens+float64(d)/float64(eventRefill))
		b.last = now
	}
	if b.tokens < 1 {
		f.dropped++
		return false
	}
	b.tokens--
	return true
}

// forget drops uid's bucket (the pod is gone).
func (f *eventFilter) forget(uid types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.buckets, uid)
}

// EventsDropped returns how many pod events the spam filter dropped.
func (m *Manager) EventsDropped() uint64 {
	m.events.mu.Lock()
	defer m.events.mu.Unlock()
	return m.events.dropped
}

// event logs a PodEvent about pod's container (none when container is
// ""), a warning as a warning, and records it when the Manager has a
// recorder and the pod's events are not spamming it.
func (m *Manager) event(pod *corev1.Pod, container, typ, reason, msg string) {
	log := m.log.Info
	switch {
	case typ == corev1.EventTypeWarning:
		log = m.log.Warn
	case reason == ReasonCreated || reason == ReasonStarted:
		log = m.log.Debug // "container started" says it already
	}
	log("pod event", "pod", key(pod), "container", container, "type", typ, "reason", reason, "message", msg)
	if m.cfg.Events == nil {
		return
	}
	now := m.now()
	if !m.events.allow(pod.UID, now) {
		return
	}
	e := PodEvent{Type: typ, Reason: reason, Message: msg, Namespace: pod.Namespace, Pod: pod.Name, UID: pod.UID}
	if container != "" {
		e.FieldPath = "spec.containers{" + container + "}"
		for _, ic := range pod.Spec.InitContainers {
			if ic.Name == container {
				e.FieldPath = "spec.initContainers{" + container + "}"
			}
		}
	}
	m.cfg.Events.Append(now, PodEventKind, e)
}

// onProbeEvent is the prober's OnEvent: a failed or errored run is a
// Warning "Unhealthy" event, a redirect not followed a Warning
// "ProbeWarning", as the kubelet's prober records them.
func (m *Manager) onProbeEvent(e prober.Event) {
	m.event(e.Pod, e.Container, corev1.EventTypeWarning, e.Reason, e.Message)
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
