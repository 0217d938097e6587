package podspec

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestValidateLifecycle(t *testing.T) {
	tests := []struct {
		name         string
		mutate       func(p *corev1.Pod)
		wantErrs     []string
		wantWarnings []string
	}{
		{
			name: "exec, httpGet and sleep hooks within the grace period are valid",
			mutate: func(p *corev1.Pod) {
				c := &p.Spec.Containers[0]
				c.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}
				c.Lifecycle = &corev1.Lifecycle{
					PostStart: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/warm", Port: intstr.FromString("http"),
						HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Hook", Value: "1"}}}},
					PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 30}},
				}
			},
		},
		{
			name: "a zero sleep is valid (AllowPodLifecycleSleepActionZeroValue, on by default)",
			mutate: func(p *corev1.Pod) {
				p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{}}}
			},
		},
		{
			name: "a negative sleep is refused",
			mutate: func(p *corev1.Pod) {
				p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: -1}}}
			},
			wantErrs: []string{"spec.containers[0].lifecycle.preStop.sleep: Invalid value: -1: must be non-negative and less than terminationGracePeriodSeconds (30)"},
		},
		{
			name: "a hook with exec and httpGet names the second handler",
			mutate: func(p *corev1.Pod) {
				p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{
					Exec: &corev1.ExecAction{Command: []string{"true"}}, HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(80)}}}
			},
			wantErrs: []string{"spec.containers[0].lifecycle.postStart.httpGet: Forbidden: may not specify more than 1 handler type"},
		},
		{
			name: "a tcpSocket hook is accepted with a warning, as the API server accepts it",
			mutate: func(p *corev1.Pod) {
				p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(80)}}}
			},
			wantWarnings: []string{"spec.containers[0].lifecycle.preStop.tcpSocket: deprecated and not run: the hook fails when it runs, as the kubelet's (use exec, httpGet or sleep)"},
		},
		{
			name: "a sidecar init container may have hooks",
			mutate: func(p *corev1.Pod) {
				always := corev1.ContainerRestartPolicyAlways
				ic := p.Spec.Containers[0]
				ic.Name, ic.RestartPolicy = "sidecar", &always
				ic.Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
				p.Spec.InitContainers = []corev1.Container{ic}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := base(t)
			tt.mutate(p)
			warnings, errs := Validate(p, Options{})
			var got []string
			for _, e := range errs {
				// A sidecar's restartPolicy is another item's: only the
				// lifecycle errors are this test's.
				if strings.Contains(e.Field, "lifecycle") {
					got = append(got, e.Error())
				}
			}
			if !slices.Equal(got, tt.wantErrs) {
				t.Errorf("errors:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.wantErrs, "\n  "))
			}
			var gotWarnings []string
			for _, w := range warnings {
				if strings.Contains(w, "lifecycle") {
					gotWarnings = append(gotWarnings, w)
				}
			}
			if !slices.Equal(gotWarnings, tt.wantWarnings) {
				t.Errorf("warnings:\n  %s\nwant:\n  %s", strings.Join(gotWarnings, "\n  "), strings.Join(tt.wantWarnings, "\n  "))
			}
		})
	}
}
