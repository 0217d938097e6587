package podspec

import (
	"errors"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestValidateSecurityContext(t *testing.T) {
	str := func(s string) *string { return &s }
	podSC := func(sc corev1.PodSecurityContext) func(p *corev1.Pod) {
		return func(p *corev1.Pod) { p.Spec.SecurityContext = &sc }
	}
	ctrSC := func(sc corev1.SecurityContext) func(p *corev1.Pod) {
		return func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext = &sc }
	}
	sysctls := func(kv ...string) func(p *corev1.Pod) {
		var s []corev1.Sysctl
		for i := 0; i < len(kv); i += 2 {
			s = append(s, corev1.Sysctl{Name: kv[i], Value: kv[i+1]})
		}
		return podSC(corev1.PodSecurityContext{Sysctls: s})
	}
	merge, strict := corev1.SupplementalGroupsPolicyMerge, corev1.SupplementalGroupsPolicyStrict
	tests := []struct {
		name     string
		opts     Options
		mutate   func(p *corev1.Pod)
		wantErrs []string
	}{
		{
			name:   "CoreDNS's lower-case drop all is accepted, as the API server accepts it",
			mutate: ctrSC(corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"all"}, Add: []corev1.Capability{"net_bind_service"}}}),
		},
		{
			name:   "capabilities with the CAP_ prefix in any case are accepted",
			mutate: ctrSC(corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"CAP_NET_ADMIN", "cap_sys_time"}}}),
		},
		{
			name:     "a name that is no capability is refused",
			mutate:   ctrSC(corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_MAGIC"}}}),
			wantErrs: []string{`spec.containers[0].securityContext.capabilities.add[0]: Invalid value: "NET_MAGIC": not a Linux capability`},
		},
		{
			name: "runAsNonRoot on the pod and the container is accepted (checked against the image at start)",
			mutate: func(p *corev1.Pod) {
				tr := true
				podSC(corev1.PodSecurityContext{RunAsNonRoot: &tr})(p)
				ctrSC(corev1.SecurityContext{RunAsNonRoot: &tr})(p)
			},
		},
		{
			name:   "supplemental groups with the Merge policy are accepted",
			mutate: podSC(corev1.PodSecurityContext{SupplementalGroups: []int64{1000, 2000}, SupplementalGroupsPolicy: &merge}),
		},
		{
			name:     "the Strict policy is refused, with the kubelet's reason, where the runtime lacks the feature",
			mutate:   podSC(corev1.PodSecurityContext{SupplementalGroupsPolicy: &strict}),
			wantErrs: []string{"spec.securityContext.supplementalGroupsPolicy: Forbidden: SupplementalGroupsPolicyNotSupported: SupplementalGroupsPolicy=Strict is not supported in this node: the container runtime does not report the supplemental_groups_policy feature"},
		},
		{
			name:   "the Strict policy is accepted where the runtime reports the feature",
			opts:   Options{SupplementalGroupsPolicy: true},
			mutate: podSC(corev1.PodSecurityContext{SupplementalGroups: []int64{1000}, SupplementalGroupsPolicy: &strict}),
		},
		{
			name:     "an unknown policy is refused whatever the runtime",
			opts:     Options{SupplementalGroupsPolicy: true},
			mutate:   podSC(corev1.PodSecurityContext{SupplementalGroupsPolicy: ptr(corev1.SupplementalGroupsPolicy("Loose"))}),
			wantErrs: []string{`spec.securityContext.supplementalGroupsPolicy: Unsupported value: "Loose": supported values: "Merge", "Strict"`},
		},
		{
			name:     "a negative supplemental group is refused",
			mutate:   podSC(corev1.PodSecurityContext{SupplementalGroups: []int64{-1}}),
			wantErrs: []string{"spec.securityContext.supplementalGroups[0]: Invalid value: -1: must be between 0 and 2147483647, inclusive"},
		},
		{
			name: "fsGroup with either change policy is accepted",
			mutate: func(p *corev1.Pod) {
				g, pol := int64(2000), corev1.FSGroupChangeOnRootMismatch
				podSC(corev1.PodSecurityContext{FSGroup: &g, FSGroupChangePolicy: &pol})(p)
			},
		},
		{
			name: "an unknown fsGroupChangePolicy is refused",
			mutate: func(p *corev1.Pod) {
				g, pol := int64(2000), corev1.PodFSGroupChangePolicy("Sometimes")
				podSC(corev1.PodSecurityContext{FSGroup: &g, FSGroupChangePolicy: &pol})(p)
			},
			wantErrs: []string{`spec.securityContext.fsGroupChangePolicy: Unsupported value: "Sometimes": supported values: "OnRootMismatch", "Always"`},
		},
		{
			name:   "safe sysctls are accepted, in either spelling",
			mutate: sysctls("net.ipv4.ip_unprivileged_port_start", "0", "kernel/shm_rmid_forced", "1"),
		},
		{
			name:     "an unsafe sysctl is refused without an allowlist",
			mutate:   sysctls("net.core.somaxconn", "1024"),
			wantErrs: []string{`spec.securityContext.sysctls[0]: Forbidden: forbidden sysctl: "net.core.somaxconn" not allowlisted (allowedUnsafeSysctls)`},
		},
		{
			name:   "an unsafe sysctl matching an allowlist pattern is accepted",
			opts:   Options{AllowedUnsafeSysctls: []string{"net.core.*", "kernel.msgmax"}},
			mutate: sysctls("net.core.somaxconn", "1024", "kernel.msgmax", "65536"),
		},
		{
			name:     "a sysctl that is not namespaced is refused even when allowlisted",
			opts:     Options{AllowedUnsafeSysctls: []string{"vm.*"}},
			mutate:   sysctls("vm.swappiness", "10"),
			wantErrs: []string{`spec.securityContext.sysctls[0]: Forbidden: sysctl "vm.swappiness" is not known to be namespaced`},
		},
		{
			name: "a net sysctl is refused for a host-network pod",
			mutate: func(p *corev1.Pod) {
				sysctls("net.ipv4.tcp_syncookies", "1")(p)
				p.Spec.HostNetwork = true
			},
			opts:     Options{AllowPrivileged: true}, // hostNetwork needs it
			wantErrs: []string{`spec.securityContext.sysctls[0]: Forbidden: sysctl "net.ipv4.tcp_syncookies" not allowed with host net enabled`},
		},
		{
			name:     "a sysctl given twice is refused",
			mutate:   sysctls("net.ipv4.tcp_syncookies", "1", "net/ipv4/tcp_syncookies", "0"),
			wantErrs: []string{`spec.securityContext.sysctls[1].name: Duplicate value: "net/ipv4/tcp_syncookies"`},
		},
		{
			name: "seccomp RuntimeDefault, Unconfined and a relative Localhost profile are accepted",
			mutate: func(p *corev1.Pod) {
				podSC(corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}})(p)
				ctrSC(corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: str("profiles/audit.json")}})(p)
			},
		},
		{
			name:     "a Localhost seccomp profile outside the profile root is refused",
			mutate:   ctrSC(corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: str("../etc/x.json")}}),
			wantErrs: []string{`spec.containers[0].securityContext.seccompProfile.localhostProfile: Invalid value: "../etc/x.json": must not contain '..'`},
		},
		{
			name:     "a Localhost seccomp profile without a path is refused",
			mutate:   podSC(corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost}}),
			wantErrs: []string{"spec.securityContext.seccompProfile.localhostProfile: Required value: must be set when seccomp type is Localhost"},
		},
		{
			name:     "an AppArmor profile is refused where the kernel has no AppArmor",
			mutate:   ctrSC(corev1.SecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}}),
			wantErrs: []string{"spec.containers[0].securityContext.appArmorProfile: Forbidden: Cannot enforce AppArmor: AppArmor is not enabled on the host"},
		},
		{
			name:   "AppArmor Unconfined needs no AppArmor",
			mutate: podSC(corev1.PodSecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}}),
		},
		{
			name:   "an AppArmor profile is accepted where the kernel has AppArmor",
			opts:   Options{AppArmorEnabled: true},
			mutate: podSC(corev1.PodSecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: str("k8s-nginx")}}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := base(t)
			tt.mutate(p)
			_, errs := Validate(p, tt.opts)
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
			}
			if !slices.Equal(got, tt.wantErrs) {
				t.Errorf("errors\ngot  %q\nwant %q", got, tt.wantErrs)
			}
		})
	}
}

func TestNormalizeSysctl(t *testing.T) {
	for in, want := range map[string]string{
		"net.ipv4.tcp_syncookies":          "net.ipv4.tcp_syncookies",
		"net/ipv4/tcp_syncookies":          "net.ipv4.tcp_syncookies",
		"net/ipv4/conf/eth0.100/rp_filter": "net.ipv4.conf.eth0/100.rp_filter",
		"net.ipv4.conf.eth0/100.rp_filter": "net.ipv4.conf.eth0/100.rp_filter",
		"kernel":                           "kernel",
	} {
		if got := NormalizeSysctl(in); got != want {
			t.Errorf("NormalizeSysctl(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCheckUnsafeSysctlPattern(t *testing.T) {
	for _, tt := range []struct {
		pattern string
		ok      bool
	}{
		{"net.core.somaxconn", true},
		{"net.*", true},
		{"kernel.msg*", true},
		{"net/ipv4/tcp_tw_reuse", true},
		{"vm.swappiness", false},
		{"kernel.*", false},
		{"*", false},
		{"net.*.rp_filter", false},
	} {
		err := CheckUnsafeSysctlPattern(tt.pattern)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrUnsafeSysctlPattern)) {
			t.Errorf("CheckUnsafeSysctlPattern(%q) = %v, want ok %v", tt.pattern, err, tt.ok)
		}
	}
}
