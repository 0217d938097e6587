package lifecycle

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Reasons and messages of the kubelet's admission (pkg/kubelet/lifecycle
// predicate.go): a pod whose nodeSelector the node does not match is
// rejected with the failed predicate's name and error.
const (
	ReasonNodeAffinity  = "NodeAffinity"
	MessageNodeAffinity = "Predicate NodeAffinity failed"
)

// StandaloneNodeLabels are the labels a kubelet without a control plane
// gives its node (kubelet_node_status.go initialNode): its hostname, lower
// case, and its OS and architecture, stable and beta. nodeSelector is
// matched against them.
func StandaloneNodeLabels(hostname string) map[string]string {
	return map[string]string{
		corev1.LabelHostname:      strings.ToLower(hostname),
		corev1.LabelOSStable:      runtime.GOOS,
		corev1.LabelArchStable:    runtime.GOARCH,
		"beta.kubernetes.io/os":   runtime.GOOS,
		"beta.kubernetes.io/arch": runtime.GOARCH,
	}
}

// defaultNodeLabels are StandaloneNodeLabels of this machine.
func defaultNodeLabels() (map[string]string, error) {
	h, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("node labels: %w", err)
	}
	return StandaloneNodeLabels(h), nil
}

// nodeAffinityError is a nodeSelector the node does not match; its text
// starts with ReasonNodeAffinity and MessageNodeAffinity.
type nodeAffinityError struct{ detail string }

func (e *nodeAffinityError) Error() string {
	return ReasonNodeAffinity + ": " + MessageNodeAffinity + ": " + e.detail
}

// matchNodeSelector is the kubelet's admission check of spec.nodeSelector
// (the NodeAffinity predicate without affinity, which nodeguard ignores):
// every key must be a node label with that value. The error, a
// *nodeAffinityError, names the first mismatch, by key order.
func matchNodeSelector(pod *corev1.Pod, labels map[string]string) error {
	keys := make([]string, 0, len(pod.Spec.NodeSelector))
	for k := range pod.Spec.NodeSelector {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		want := pod.Spec.NodeSelector[k]
		got, ok := labels[k]
		if ok && got == want {
			continue
		}
		p := field.NewPath("spec", "nodeSelector").Key(k)
		if !ok {
			return &nodeAffinityError{fmt.Sprintf("%s wants %q, and the node has no label %s", p, want, k)}
		}
		return &nodeAffinityError{fmt.Sprintf("%s wants %q, and the node's label is %q", p, want, got)}
	}
	return nil
}
