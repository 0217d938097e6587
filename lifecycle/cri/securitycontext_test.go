package cri

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestSecurityProfiles(t *testing.T) {
	localhost := func(p string) *corev1.SeccompProfile {
		return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &p}
	}
	tests := []struct {
		name            string
		pod, ctr        *corev1.SeccompProfile
		podAA, ctrAA    *corev1.AppArmorProfile
		annotations     map[string]string
		wantSeccomp     *runtimeapi.SecurityProfile
		wantAppArmor    *runtimeapi.SecurityProfile
		wantAppArmorOld string
	}{
		{
			name:        "no profile is seccomp Unconfined and the runtime's AppArmor default",
			wantSeccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined},
		},
		{
			name:        "the pod's RuntimeDefault applies to a container without one",
			pod:         &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			wantSeccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
		},
		{
			name:        "the container's Localhost profile wins and is a file beneath the profile root",
			pod:         &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			ctr:         localhost("profiles/audit.json"),
			wantSeccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "/var/lib/nodeguard/seccomp/profiles/audit.json"},
		},
		{
			name:        "the container's Unconfined wins over the pod's RuntimeDefault",
			pod:         &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			ctr:         &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined},
			wantSeccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined},
		},
		{
			name:            "AppArmor RuntimeDefault from the pod, in both CRI spellings",
			podAA:           &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault},
			wantSeccomp:     &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined},
			wantAppArmor:    &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
			wantAppArmorOld: "runtime/default",
		},
		{
			name:            "the container's Localhost AppArmor profile is named, not a path",
			podAA:           &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined},
			ctrAA:           &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: ptr("k8s-nginx")},
			wantSeccomp:     &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined},
			wantAppArmor:    &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "k8s-nginx"},
			wantAppArmorOld: "localhost/k8s-nginx",
		},
		{
			name:            "the deprecated annotation names the container's profile before the pod's field, as the kubelet reads it",
			podAA:           &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault},
			annotations:     map[string]string{corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "app": "localhost/k8s-apparmor-example-deny-write"},
			wantSeccomp:     &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined},
			wantAppArmor:    &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "k8s-apparmor-example-deny-write"},
			wantAppArmorOld: "localhost/k8s-apparmor-example-deny-write",
		},
		{
			name:        "another container's annotation is not this one's",
			annotations: map[string]string{corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "sidecar": "unconfined"},
			wantSeccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod()
			pod.Annotations = tt.annotations
			pod.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: tt.pod, AppArmorProfile: tt.podAA}
			pod.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{SeccompProfile: tt.ctr, AppArmorProfile: tt.ctrAA}
			cfg, err := ContainerConfig(pod, &pod.Spec.Containers[0], ContainerOptions{SeccompProfileRoot: SeccompProfileRoot("/var/lib/nodeguard")})
			if err != nil {
				t.Fatal(err)
			}
			sc := cfg.Linux.SecurityContext
			if sc.Seccomp.String() != tt.wantSeccomp.String() {
				t.Errorf("seccomp = %v, want %v", sc.Seccomp, tt.wantSeccomp)
			}
			if sc.Apparmor.String() != tt.wantAppArmor.String() || sc.ApparmorProfile != tt.wantAppArmorOld {
				t.Errorf("apparmor = %v %q, want %v %q", sc.Apparmor, sc.ApparmorProfile, tt.wantAppArmor, tt.wantAppArmorOld)
			}
		})
	}
}

func TestVerifyRunAsNonRoot(t *testing.T) {
	uid := func(v int64) *runtimeapi.Image { return &runtimeapi.Image{Uid: &runtimeapi.Int64Value{Value: v}} }
	tests := []struct {
		name       string
		pod, ctr   *bool
		podUser    *int64
		ctrUser    *int64
		img        *runtimeapi.Image
		needsImage bool
		want       string
	}{
		{name: "without runAsNonRoot a root image runs", img: uid(0)},
		{name: "runAsNonRoot false on the container overrides the pod's true", pod: ptr(true), ctr: ptr(false), img: uid(0)},
		{name: "an image running as uid 1000 passes", ctr: ptr(true), img: uid(1000), needsImage: true},
		{name: "an image running as root is refused", pod: ptr(true), img: uid(0), needsImage: true,
			want: `container has runAsNonRoot and image will run as root (pod: "app_default(uid-1)", container: app)`},
		{name: "an image that names no user runs as root and is refused", ctr: ptr(true), img: &runtimeapi.Image{}, needsImage: true,
			want: `container has runAsNonRoot and image will run as root (pod: "app_default(uid-1)", container: app)`},
		{name: "an image whose user is a name cannot be verified and is refused", ctr: ptr(true), img: &runtimeapi.Image{Username: "nginx"}, needsImage: true,
			want: `container has runAsNonRoot and image has non-numeric user (nginx), cannot verify user is non-root (pod: "app_default(uid-1)", container: app)`},
		{name: "the pod's runAsUser decides without the image", ctr: ptr(true), podUser: ptr(int64(1000))},
		{name: "runAsUser 0 breaks the policy", pod: ptr(true), podUser: ptr(int64(1000)), ctrUser: ptr(int64(0)),
			want: `container's runAsUser breaks non-root policy (pod: "app_default(uid-1)", container: app)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod()
			pod.Name, pod.Namespace, pod.UID = "app", "default", "uid-1"
			pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: tt.pod, RunAsUser: tt.podUser}
			c := &pod.Spec.Containers[0]
			c.Name = "app"
			c.SecurityContext = &corev1.SecurityContext{RunAsNonRoot: tt.ctr, RunAsUser: tt.ctrUser}
			if got := NeedsImageUser(pod, c); got != tt.needsImage {
				t.Errorf("NeedsImageUser = %v, want %v", got, tt.needsImage)
			}
			img := tt.img
			if !tt.needsImage {
				img = nil // what the caller passes when it did not ask
			}
			err := VerifyRunAsNonRoot(pod, c, img)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("err = %v, want none", err)
			case tt.want != "" && (err == nil || err.Error() != tt.want):
				t.Errorf("err = %v, want %s", err, tt.want)
			}
		})
	}
}

func TestSandboxSysctlsAreDotted(t *testing.T) {
	pod := testPod()
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{
		{Name: "net/ipv4/ip_unprivileged_port_start", Value: "0"}, {Name: "kernel.shm_rmid_forced", Value: "1"}}}
	got := SandboxConfig(pod, SandboxOptions{CgroupParent: "p"}).Linux.Sysctls
	if len(got) != 2 || got["net.ipv4.ip_unprivileged_port_start"] != "0" || got["kernel.shm_rmid_forced"] != "1" {
		t.Errorf("sysctls = %v", got)
	}
}
