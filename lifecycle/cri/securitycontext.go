package cri

import (
	"fmt"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle/podspec"
)

// SeccompProfileRoot is where the kubelet keeps Localhost seccomp
// profiles, beneath its root directory (the seccompProfileRoot default,
// <rootDir>/seccomp).
func SeccompProfileRoot(rootDir string) string { return filepath.Join(rootDir, "seccomp") }

// seccompProfile is the kubelet's getSeccompProfile without
// --seccomp-default: the container's seccompProfile, else the pod's, else
// Unconfined. A Localhost profile is the file beneath root.
func seccompProfile(pod *corev1.Pod, c *corev1.Container, root string) *runtimeapi.SecurityProfile {
	var p *corev1.SeccompProfile
	if psc := pod.Spec.SecurityContext; psc != nil {
		p = psc.SeccompProfile
	}
	if c.SecurityContext != nil && c.SecurityContext.SeccompProfile != nil {
		p = c.SecurityContext.SeccompProfile
	}
	if p == nil {
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}
	}
	switch p.Type {
	case corev1.SeccompProfileTypeRuntimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
	case corev1.SeccompProfileTypeLocalhost:
		var name string
		if p.LocalhostProfile != nil {
			name = *p.LocalhostProfile
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: filepath.Join(root, name)}
	}
	return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}
}

// appArmorProfile is the kubelet's getAppArmorProfile: the profile
// podspec.AppArmorProfile finds for c (its field, else the deprecated
// annotation, else the pod's field); nil when none is set, so that the
// runtime applies its default where the kernel has AppArmor. The second
// result is the deprecated string form (runtime/default, unconfined,
// localhost/<name>), which runtimes before the SecurityProfile field
// (containerd 1.6) read instead.
func appArmorProfile(pod *corev1.Pod, c *corev1.Container) (*runtimeapi.SecurityProfile, string) {
	p := podspec.AppArmorProfile(pod, c)
	if p == nil {
		return nil, ""
	}
	switch p.Type {
	case corev1.AppArmorProfileTypeRuntimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, "runtime/default"
	case corev1.AppArmorProfileTypeLocalhost:
		var name string
		if p.LocalhostProfile != nil {
			name = *p.LocalhostProfile
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: name}, "localhost/" + name
	}
	return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, "unconfined"
}

// runAsNonRoot is the effective runAsNonRoot of c: the container's, else
// the pod's.
func runAsNonRoot(pod *corev1.Pod, c *corev1.Container) bool {
	v := false
	if psc := pod.Spec.SecurityContext; psc != nil && psc.RunAsNonRoot != nil {
		v = *psc.RunAsNonRoot
	}
	if c.SecurityContext != nil && c.SecurityContext.RunAsNonRoot != nil {
		v = *c.SecurityContext.RunAsNonRoot
	}
	return v
}

// NeedsImageUser reports whether VerifyRunAsNonRoot needs the image's
// user: runAsNonRoot is set and no runAsUser decides it.
func NeedsImageUser(pod *corev1.Pod, c *corev1.Container) bool {
	return runAsNonRoot(pod, c) && effectiveRunAsUser(pod, c) == nil
}

func effectiveRunAsUser(pod *corev1.Pod, c *corev1.Container) *int64 {
	var uid *int64
	if psc := pod.Spec.SecurityContext; psc != nil {
		uid = psc.RunAsUser
	}
	if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
		uid = c.SecurityContext.RunAsUser
	}
	return uid
}

// VerifyRunAsNonRoot is the kubelet's verifyRunAsNonRoot: with
// runAsNonRoot, the container must not run as uid 0, judged by its
// runAsUser when it has one and by the image's user (img, from
// ImageStatus) otherwise. An image that names no user runs as root; one
// whose user is a name cannot be checked and is refused. The messages are
// the kubelet's, so that what a user searches for is what they see.
func VerifyRunAsNonRoot(pod *corev1.Pod, c *corev1.Container, img *runtimeapi.Image) error {
	if !runAsNonRoot(pod, c) {
		return nil
	}
	if uid := effectiveRunAsUser(pod, c); uid != nil {
		if *uid == 0 {
			return fmt.Errorf("container's runAsUser breaks non-root policy (pod: %q, container: %s)", podDesc(pod), c.Name)
		}
		return nil
	}
	switch {
	case img.GetUid() != nil && img.GetUid().GetValue() != 0:
		return nil
	case img.GetUid() == nil && img.GetUsername() != "":
		return fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root (pod: %q, container: %s)",
			img.GetUsername(), podDesc(pod), c.Name)
	}
	return fmt.Errorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", podDesc(pod), c.Name)
}

// podDesc is the kubelet's format.Pod: name_namespace(uid).
func podDesc(pod *corev1.Pod) string {
	return fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
}
