package podspec

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

const aaKey = corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "app"

func TestValidateAppArmorAnnotations(t *testing.T) {
	str := func(s string) *string { return &s }
	annotate := func(kv ...string) func(p *corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Annotations = map[string]string{}
			for i := 0; i < len(kv); i += 2 {
				p.Annotations[kv[i]] = kv[i+1]
			}
		}
	}
	withField := func(f *corev1.AppArmorProfile, pod bool, then func(*corev1.Pod)) func(p *corev1.Pod) {
		return func(p *corev1.Pod) {
			then(p)
			if pod {
				p.Spec.SecurityContext = &corev1.PodSecurityContext{AppArmorProfile: f}
				return
			}
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AppArmorProfile: f}
		}
	}
	on := Options{AppArmorEnabled: true}
	deprecated := `metadata.annotations[` + aaKey + `]: deprecated since v1.30; use the "appArmorProfile" field instead`
	tests := []struct {
		name         string
		opts         Options
		mutate       func(p *corev1.Pod)
		wantErrs     []string
		wantWarnings []string
	}{
		{
			name:         "the documentation's localhost annotation is accepted where the kernel has AppArmor, with the API server's warning",
			opts:         on,
			mutate:       annotate(aaKey, "localhost/k8s-apparmor-example-deny-write"),
			wantWarnings: []string{deprecated},
		},
		{
			name:         "it is refused with the kubelet's reason where the kernel has none",
			mutate:       annotate(aaKey, "localhost/k8s-apparmor-example-deny-write"),
			wantErrs:     []string{"metadata.annotations[" + aaKey + "]: Forbidden: Cannot enforce AppArmor: AppArmor is not enabled on the host"},
			wantWarnings: []string{deprecated},
		},
		{
			name:         "runtime/default needs AppArmor too",
			mutate:       annotate(aaKey, "runtime/default"),
			wantErrs:     []string{"metadata.annotations[" + aaKey + "]: Forbidden: Cannot enforce AppArmor: AppArmor is not enabled on the host"},
			wantWarnings: []string{deprecated},
		},
		{
			name:         "unconfined needs no AppArmor",
			mutate:       annotate(aaKey, "unconfined"),
			wantWarnings: []string{deprecated},
		},
		{
			name:     "an annotation for a container the pod does not have is refused",
			opts:     on,
			mutate:   annotate(corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix+"nginx", "runtime/default"),
			wantErrs: []string{`metadata.annotations[` + corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + `nginx]: Invalid value: "nginx": container not found`},
			wantWarnings: []string{`metadata.annotations[` + corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix +
				`nginx]: deprecated since v1.30; use the "appArmorProfile" field instead`},
		},
		{
			name:         "a value that is no profile is refused",
			opts:         on,
			mutate:       annotate(aaKey, "docker-default"),
			wantErrs:     []string{`metadata.annotations[` + aaKey + `]: Invalid value: "docker-default": invalid AppArmor profile name: "docker-default"`},
			wantWarnings: []string{deprecated},
		},
		{
			name:         "a localhost profile without a name is refused as the kubelet refuses it",
			opts:         on,
			mutate:       annotate(aaKey, "localhost/ "),
			wantErrs:     []string{`metadata.annotations[` + aaKey + `]: Invalid value: "localhost/ ": invalid empty AppArmor profile name`},
			wantWarnings: []string{deprecated},
		},
		{
			name:         "an annotation and the container's field that disagree on the type are refused",
			opts:         on,
			mutate:       withField(&corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}, false, annotate(aaKey, "localhost/x")),
			wantErrs:     []string{"spec.containers[0].securityContext.appArmorProfile.type: Forbidden: apparmor type in annotation and field must match"},
			wantWarnings: []string{deprecated},
		},
		{
			name: "an annotation and the pod's field that name different profiles are refused",
			opts: on,
			mutate: withField(&corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: str("a")}, true,
				annotate(aaKey, "localhost/b")),
			wantErrs:     []string{"spec.containers[0].securityContext.appArmorProfile.localhostProfile: Forbidden: apparmor profile in annotation and field must match"},
			wantWarnings: []string{deprecated},
		},
		{
			name: "an annotation and a field that agree are accepted",
			opts: on,
			mutate: withField(&corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: str("a")}, false,
				annotate(aaKey, "localhost/a")),
			wantWarnings: []string{deprecated},
		},
		{
			name:   "other annotations are not AppArmor's",
			mutate: annotate("container.seccomp.security.alpha.kubernetes.io/app", "runtime/default", "example.com/apparmor", "x"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := base(t)
			tt.mutate(p)
			warnings, errs := Validate(p, tt.opts)
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
			}
			if !slices.Equal(got, tt.wantErrs) {
				t.Errorf("errors\ngot  %q\nwant %q", got, tt.wantErrs)
			}
			if !slices.Equal(warnings, tt.wantWarnings) {
				t.Errorf("warnings\ngot  %q\nwant %q", warnings, tt.wantWarnings)
			}
		})
	}
}

func TestAppArmorProfile(t *testing.T) {
	str := func(s string) *string { return &s }
	localhost := func(n string) *corev1.AppArmorProfile {
		return &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: str(n)}
	}
	runtimeDefault := &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}
	for _, tt := range []struct {
		name          string
		pod, ctr      *corev1.AppArmorProfile
		annotation    string
		hasAnnotation bool
		want          *corev1.AppArmorProfile
	}{
		{name: "nothing set is nil: the runtime's default"},
		{name: "the pod's field applies to its containers", pod: localhost("p"), want: localhost("p")},
		{name: "the annotation comes before the pod's field", pod: localhost("p"), annotation: "localhost/a", hasAnnotation: true, want: localhost("a")},
		{name: "the container's field comes before the annotation", ctr: runtimeDefault, annotation: "localhost/a", hasAnnotation: true, want: runtimeDefault},
		{name: "unconfined in the annotation", annotation: "unconfined", hasAnnotation: true,
			want: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}},
		{name: "an annotation that is no profile counts as none", pod: localhost("p"), annotation: "docker-default", hasAnnotation: true, want: localhost("p")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}
			if tt.pod != nil {
				p.Spec.SecurityContext = &corev1.PodSecurityContext{AppArmorProfile: tt.pod}
			}
			if tt.ctr != nil {
				p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AppArmorProfile: tt.ctr}
			}
			if tt.hasAnnotation {
				p.Annotations = map[string]string{aaKey: tt.annotation}
			}
			got := AppArmorProfile(p, &p.Spec.Containers[0])
			if got.String() != tt.want.String() {
				t.Errorf("AppArmorProfile = %v, want %v", got, tt.want)
			}
		})
	}
}
