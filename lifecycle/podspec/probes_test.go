package podspec

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestValidateProbes(t *testing.T) {
	exec := corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}
	five := int64(5)
	zero := int64(0)
	tests := []struct {
		name     string
		mutate   func(c *corev1.Container)
		wantErrs []string
	}{
		{
			name: "exec, httpGet and tcpSocket probes with every timing field are valid",
			mutate: func(c *corev1.Container) {
				c.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}
				c.StartupProbe = &corev1.Probe{ProbeHandler: exec, PeriodSeconds: 1, FailureThreshold: 30, TerminationGracePeriodSeconds: &five}
				c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
					Path: "/healthz", Port: intstr.FromString("http"), Scheme: corev1.URISchemeHTTPS,
					HTTPHeaders: []corev1.HTTPHeader{{Name: "Host", Value: "example.org"}, {Name: "X-Probe", Value: "1"}},
				}}, InitialDelaySeconds: 3, TimeoutSeconds: 2, PeriodSeconds: 5, SuccessThreshold: 1, FailureThreshold: 3}
				c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}, SuccessThreshold: 2}
			},
		},
		{
			name:     "a probe without a handler is refused",
			mutate:   func(c *corev1.Container) { c.LivenessProbe = &corev1.Probe{PeriodSeconds: 1} },
			wantErrs: []string{"spec.containers[0].livenessProbe: Required value: must specify a handler type"},
		},
		{
			name: "a probe with two handlers is refused",
			mutate: func(c *corev1.Container) {
				c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: exec.Exec, TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(80)}}}
			},
			wantErrs: []string{"spec.containers[0].readinessProbe: Forbidden: may not specify more than 1 handler type"},
		},
		{
			name:     "a liveness probe's successThreshold must be 1",
			mutate:   func(c *corev1.Container) { c.LivenessProbe = &corev1.Probe{ProbeHandler: exec, SuccessThreshold: 2} },
			wantErrs: []string{"spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1"},
		},
		{
			name:     "negative timings are refused",
			mutate:   func(c *corev1.Container) { c.StartupProbe = &corev1.Probe{ProbeHandler: exec, PeriodSeconds: -1} },
			wantErrs: []string{"spec.containers[0].startupProbe.periodSeconds: Invalid value: -1: must be greater than or equal to 0"},
		},
		{
			name: "a readiness probe has no terminationGracePeriodSeconds, the others a positive one",
			mutate: func(c *corev1.Container) {
				c.ReadinessProbe = &corev1.Probe{ProbeHandler: exec, TerminationGracePeriodSeconds: &five}
				c.LivenessProbe = &corev1.Probe{ProbeHandler: exec, TerminationGracePeriodSeconds: &zero}
			},
			wantErrs: []string{
				"spec.containers[0].livenessProbe.terminationGracePeriodSeconds: Invalid value: 0: must be greater than 0",
				"spec.containers[0].readinessProbe.terminationGracePeriodSeconds: Invalid value: 5: must not be set for readinessProbes",
			},
		},
		{
			name: "a named port must be one of the container's",
			mutate: func(c *corev1.Container) {
				c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("web")}}}
			},
			wantErrs: []string{`spec.containers[0].livenessProbe.tcpSocket.port: Invalid value: "web": must name one of the container's ports`},
		},
		{
			name: "a bad scheme, header name and host are refused",
			mutate: func(c *corev1.Container) {
				c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
					Port: intstr.FromInt32(70000), Scheme: "FTP", Host: "a host", HTTPHeaders: []corev1.HTTPHeader{{Name: "bad name"}},
				}}}
			},
			wantErrs: []string{
				"spec.containers[0].livenessProbe.httpGet.port: Invalid value: 70000: must be between 1 and 65535, inclusive",
				`spec.containers[0].livenessProbe.httpGet.scheme: Unsupported value: "FTP": supported values: "HTTP", "HTTPS"`,
				`spec.containers[0].livenessProbe.httpGet.host: Invalid value: "a host": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)`,
				`spec.containers[0].livenessProbe.httpGet.httpHeaders[0].name: Invalid value: "bad name": a valid HTTP header must consist of alphanumeric characters, '-', '_' or '.'`,
			},
		},
		{
			name: "a gRPC probe with a service is accepted",
			mutate: func(c *corev1.Container) {
				svc := "nodeguard.test"
				c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 9090, Service: &svc}}}
			},
		},
		{
			name: "a gRPC probe's port must be in range",
			mutate: func(c *corev1.Container) {
				c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 0}}}
			},
			wantErrs: []string{"spec.containers[0].livenessProbe.grpc.port: Invalid value: 0: must be between 1 and 65535, inclusive"},
		},
		{
			name: "an exec probe needs a command",
			mutate: func(c *corev1.Container) {
				c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{}}}
			},
			wantErrs: []string{"spec.containers[0].livenessProbe.exec.command: Required value"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := base(t)
			tt.mutate(&p.Spec.Containers[0])
			_, errs := Validate(p, Options{})
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
			}
			if !slices.Equal(got, tt.wantErrs) {
				t.Errorf("errors:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.wantErrs, "\n  "))
			}
		})
	}
	t.Run("an init container may not have probes", func(t *testing.T) {
		p := base(t)
		ic := p.Spec.Containers[0]
		ic.Name, ic.ReadinessProbe, ic.StartupProbe = "init", &corev1.Probe{ProbeHandler: exec}, &corev1.Probe{ProbeHandler: exec}
		p.Spec.InitContainers = []corev1.Container{ic}
		_, errs := Validate(p, Options{})
		want := []string{
			"spec.initContainers[0].readinessProbe: Forbidden: may not be set for init containers",
			"spec.initContainers[0].startupProbe: Forbidden: may not be set for init containers",
		}
		var got []string
		for _, e := range errs {
			got = append(got, e.Error())
		}
		if !slices.Equal(got, want) {
			t.Errorf("errors:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
	})
}
