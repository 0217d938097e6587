// Package admission is the kubelet's admission of a pod to the node, the
// decision part of it: whether the pod's requests fit the node's
// allocatable beside the pods already there (the kubelet's noderesources
// fit check at admission), and whether the node's pressure conditions
// admit it (pkg/kubelet/eviction's Admit, with its memory-pressure
// toleration exception). Refusals carry the kubelet's reasons and messages
// word for word (Reason): tools and users match on them.
//
// It decides on the pods and figures its caller gives it; the agent wires
// it to the lifecycle's admission hook and node mode's pod source.
package admission

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"

	"github.com/nodeguard/nodeguard/eviction"
	"github.com/nodeguard/nodeguard/qos"
)

// Fit is the kubelet's resource admission (its noderesources fit check at
// admission): the pod's requests, with those of the pods already running
// that are not terminal, must fit the node's allocatable; the refusal is
// a *ResourceError, whose reason is "OutOf<resource>".
func Fit(p *corev1.Pod, active []*corev1.Pod, alloc corev1.ResourceList) error {
	want := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
	used := corev1.ResourceList{}
	running := int64(0)
	for _, o := range active {
		if o.UID == p.UID || o.Status.Phase == corev1.PodSucceeded || o.Status.Phase == corev1.PodFailed || o.DeletionTimestamp != nil {
			continue
		}
		running++
		for name, q := range resourcehelper.PodRequests(o, resourcehelper.PodResourcesOptions{}) {
			u := used[name]
			u.Add(q)
			used[name] = u
		}
	}
	pods := alloc[corev1.ResourcePods]
	if n := running + 1; !pods.IsZero() && n > pods.Value() {
		return &ResourceError{Name: corev1.ResourcePods, Requested: 1, Used: n - 1, Capacity: pods.Value()}
	}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
		req, ok := want[name]
		if !ok || req.IsZero() {
			continue
		}
		capq, ok := alloc[name]
		if !ok {
			continue
		}
		u := used[name]
		value := func(q resource.Quantity) int64 {
			if name == corev1.ResourceCPU {
				return q.MilliValue()
			}
			return q.Value()
		}
		if value(req)+value(u) > value(capq) {
			return &ResourceError{Name: name, Requested: value(req), Used: value(u), Capacity: value(capq)}
		}
	}
	return nil
}

// ResourceError is a pod that does not fit, in the kubelet's words. CPU
// is in millicores, the other resources in their units.
type ResourceError struct {
	Name                      corev1.ResourceName
	Requested, Used, Capacity int64
}

// Reason is the pod status reason of the refusal, the kubelet's.
func (e *ResourceError) Reason() string { return "OutOf" + string(e.Name) }

func (e *ResourceError) Error() string {
	return fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d", e.Name, e.Requested, e.Used, e.Capacity)
}

// Pressure is the kubelet's eviction admission of p under pol's node
// conditions (eviction.Policy.Admit), with the exception Policy.Admit
// leaves to its caller, whose Pod carries no tolerations
// (TolerableMemoryPressure). A refusal is an *eviction.AdmitError.
func Pressure(pol *eviction.Policy, p *corev1.Pod) error {
	if TolerableMemoryPressure(pol.Conditions(), p) {
		return nil
	}
	return pol.Admit(eviction.Pod{UID: p.UID, Namespace: p.Namespace, Name: p.Name, QOS: qos.Class(p),
		Priority: qos.Priority(p), Critical: qos.IsCritical(p)})
}

// TolerableMemoryPressure is the kubelet's exception to its eviction
// admission (pkg/kubelet/eviction Admit): under MemoryPressure alone, a
// BestEffort pod that tolerates the node.kubernetes.io/memory-pressure
// NoSchedule taint is admitted.
func TolerableMemoryPressure(conds map[eviction.Condition]bool, p *corev1.Pod) bool {
	if !conds[eviction.MemoryPressure] || conds[eviction.DiskPressure] || conds[eviction.PIDPressure] {
		return false
	}
	taint := &corev1.Taint{Key: corev1.TaintNodeMemoryPressure, Effect: corev1.TaintEffectNoSchedule}
	for i := range p.Spec.Tolerations {
		if p.Spec.Tolerations[i].ToleratesTaint(klog.Background(), taint, false) {
			return true
		}
	}
	return false
}

// Reason is the pod status reason and message of a refusal of Fit or
// Pressure, as the kubelet's admission results name them; ok is false
// for any other error, which the caller names.
func Reason(err error) (reason, message string, ok bool) {
	var re *ResourceError
	var ae *eviction.AdmitError
	switch {
	case errors.As(err, &re):
		return re.Reason(), re.Error(), true
	case errors.As(err, &ae):
		return eviction.AdmitReason, ae.Error(), true
	}
	return "", "", false
}
