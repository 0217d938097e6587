package eviction

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// The kubelet's eviction message formats (pkg/kubelet/eviction/helpers.go).
// The kubelet names containers that exceed their requests; nodeguard's
// Pod carries pod-level usage and requests, so the pod sentence (the
// kubelet's podMessageFmt) is used.
const (
	nodeLowMessageFmt      = "The node was low on resource: %v. "
	thresholdMetMessageFmt = "Threshold quantity: %v, available: %v. "
	podMessageFmt          = "Pod %s was using %s, request is %s, has larger consumption of %v. "
	psiMessageFmt          = "Pressure stall %s is %s%%, above %s%% for %v. "
	podPSIMessageFmt       = "The pod was under pressure: %v. "
)

// quantity formats v as the kubelet's messages do: BinarySI for bytes,
// DecimalSI for counts.
func quantity(v int64, binary bool) string {
	f := resource.DecimalSI
	if binary {
		f = resource.BinarySI
	}
	return resource.NewQuantity(v, f).String()
}

// thresholdMessage is the pod status message of a threshold's decision.
func thresholdMessage(e *thresholdEval, victim *Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, nodeLowMessageFmt, e.info.starved)
	q := e.t.Value.String()
	if e.t.Value.Percentage != 0 {
		q = quantity(e.quantity, e.info.binary)
	}
	fmt.Fprintf(&b, thresholdMetMessageFmt, q, quantity(e.obs.Available, e.info.binary))
	podUsage(&b, e.info.starved, victim)
	return strings.TrimSpace(b.String())
}

// podUsage appends the pod sentence when the victim uses more than it
// requested of the starved resource (memory or ephemeral-storage).
func podUsage(b *strings.Builder, starved string, victim *Pod) {
	switch starved {
	case "memory":
		if !victim.UsageUnknown && victim.MemoryUsage > victim.MemoryRequest {
			fmt.Fprintf(b, podMessageFmt, victim.Name, quantity(victim.MemoryUsage, true), quantity(victim.MemoryRequest, true), starved)
		}
	case "ephemeral-storage":
		if victim.EphemeralUsage > victim.EphemeralRequest {
			fmt.Fprintf(b, podMessageFmt, victim.Name, quantity(victim.EphemeralUsage, true), quantity(victim.EphemeralRequest, true), starved)
		}
	}
}

// psiMessage is the pod status message of a PSI rule's decision.
func psiMessage(r *PSIRule, value float64, victim *Pod, pod bool) string {
	var b strings.Builder
	if pod {
		fmt.Fprintf(&b, podPSIMessageFmt, r.Resource)
	} else {
		fmt.Fprintf(&b, nodeLowMessageFmt, r.Resource)
	}
	fmt.Fprintf(&b, psiMessageFmt, r.Signal(), strconv.FormatFloat(value, 'f', -1, 64),
		strconv.FormatFloat(r.Percent, 'f', -1, 64), r.For)
	if r.resource() == ResourceMemory {
		podUsage(&b, "memory", victim)
	}
	return strings.TrimSpace(b.String())
}
