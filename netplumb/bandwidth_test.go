package netplumb

import (
	"errors"
	"strings"
	"testing"
)

func TestBandwidthFromAnnotations(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ann     map[string]string
		want    *Bandwidth
		wantErr string
	}{
		{"no annotations mean no shaping", nil, nil, ""},
		{"unrelated annotations mean no shaping", map[string]string{"a": "b"}, nil, ""},
		{"decimal suffixes are powers of ten", map[string]string{AnnotationIngressBandwidth: "1M", AnnotationEgressBandwidth: "2M"},
			&Bandwidth{IngressRate: 1e6, IngressBurst: DefaultBurst, EgressRate: 2e6, EgressBurst: DefaultBurst}, ""},
		{"binary suffixes are powers of two", map[string]string{AnnotationEgressBandwidth: "1Mi"},
			&Bandwidth{EgressRate: 1 << 20, EgressBurst: DefaultBurst}, ""},
		{"ingress alone shapes only ingress", map[string]string{AnnotationIngressBandwidth: "10M"},
			&Bandwidth{IngressRate: 1e7, IngressBurst: DefaultBurst}, ""},
		{"the lower bound 1k is allowed", map[string]string{AnnotationIngressBandwidth: "1k"},
			&Bandwidth{IngressRate: 1000, IngressBurst: DefaultBurst}, ""},
		{"the upper bound 1P is allowed", map[string]string{AnnotationIngressBandwidth: "1P"},
			&Bandwidth{IngressRate: 1e15, IngressBurst: DefaultBurst}, ""},
		{"fractions round up as in the kubelet", map[string]string{AnnotationIngressBandwidth: "999.5"},
			&Bandwidth{IngressRate: 1000, IngressBurst: DefaultBurst}, ""},
		{"below 1k is unreasonably small", map[string]string{AnnotationIngressBandwidth: "999"}, nil, "unreasonably small"},
		{"above 1P is unreasonably large", map[string]string{AnnotationEgressBandwidth: "2P"}, nil, "unreasonably large"},
		{"garbage is an error naming the annotation", map[string]string{AnnotationEgressBandwidth: "fast"}, nil, `kubernetes.io/egress-bandwidth "fast"`},
		{"a negative rate is unreasonably small", map[string]string{AnnotationIngressBandwidth: "-1M"}, nil, "unreasonably small"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := BandwidthFromAnnotations(tc.ann)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrInvalidConfig) {
					t.Fatalf("err = %v, want one containing %q and wrapping ErrInvalidConfig", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
