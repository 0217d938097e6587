package netplumb

import (
	"fmt"
	"math"

	"k8s.io/apimachinery/pkg/api/resource"
)

// The pod annotations the kubelet and the runtimes read for traffic
// shaping. Ingress is traffic into the pod, egress traffic out of it.
const (
	AnnotationIngressBandwidth = "kubernetes.io/ingress-bandwidth"
	AnnotationEgressBandwidth  = "kubernetes.io/egress-bandwidth"
)

// DefaultBurst is the burst (in bits) given to a rate from annotations,
// which have no burst of their own: the value containerd and CRI-O pass,
// the largest the bandwidth plugin accepts (it stores bytes in 32 bits).
const DefaultBurst = math.MaxUint32

// The kubelet's bounds on a bandwidth annotation
// (k8s.io/kubernetes/pkg/util/bandwidth): below 1 kbit/s nothing useful
// passes, above 1 Pbit/s is a typo.
var (
	minBandwidth = resource.MustParse("1k")
	maxBandwidth = resource.MustParse("1P")
)

// Bandwidth is the traffic shaping of one pod, the bandwidth plugin's
// runtimeConfig: rates in bits per second, bursts in bits. A zero rate
// means no shaping in that direction.
type Bandwidth struct {
	IngressRate  uint64 `json:"ingressRate,omitempty"`
	IngressBurst uint64 `json:"ingressBurst,omitempty"`
	EgressRate   uint64 `json:"egressRate,omitempty"`
	EgressBurst  uint64 `json:"egressBurst,omitempty"`
}

// BandwidthFromAnnotations reads the kubernetes.io/ingress-bandwidth and
// kubernetes.io/egress-bandwidth annotations with the kubelet's semantics
// (ExtractPodBandwidthResources): each is a resource quantity in bits per
// second ("10M" is 10^7, "1Mi" is 2^20), an unparsable one is an error, and
// so is one outside 1k..1P. Each rate gets DefaultBurst, as containerd
// gives it. It returns nil when neither annotation is present.
func BandwidthFromAnnotations(ann map[string]string) (*Bandwidth, error) {
	in, err := bandwidthAnnotation(ann, AnnotationIngressBandwidth)
	if err != nil {
		return nil, err
	}
	out, err := bandwidthAnnotation(ann, AnnotationEgressBandwidth)
	if err != nil {
		return nil, err
	}
	if in == 0 && out == 0 {
		return nil, nil
	}
	bw := &Bandwidth{IngressRate: in, EgressRate: out}
	if in != 0 {
		bw.IngressBurst = DefaultBurst
	}
	if out != 0 {
		bw.EgressBurst = DefaultBurst
	}
	return bw, nil
}

// bandwidthAnnotation returns annotation key in bits per second, 0 if it
// is absent.
func bandwidthAnnotation(ann map[string]string, key string) (uint64, error) {
	s, ok := ann[key]
	if !ok {
		return 0, nil
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, fmt.Errorf("netplumb: annotation %s %q: %w: %w", key, s, err, ErrInvalidConfig)
	}
	// Compare Value (rounded up to an integer) as the kubelet does, so that
	// the same annotations pass and fail.
	switch {
	case q.Value() < minBandwidth.Value():
		return 0, fmt.Errorf("netplumb: annotation %s %q: unreasonably small (< 1kbit): %w", key, s, ErrInvalidConfig)
	case q.Value() > maxBandwidth.Value():
		return 0, fmt.Errorf("netplumb: annotation %s %q: unreasonably large (> 1Pbit): %w", key, s, ErrInvalidConfig)
	}
	return uint64(q.Value()), nil
}
