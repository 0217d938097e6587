package podspec

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// AppArmorProfile is the kubelet's apparmor.GetProfile: the profile that
// applies to c, a container of pod: its securityContext.appArmorProfile,
// else the deprecated annotation
// container.apparmor.security.beta.kubernetes.io/<name> (which the kubelet
// reads for static pods, whose annotations no API server turned into
// fields, as nodeguard's pods never meet one), else the pod's
// securityContext.appArmorProfile (an annotation that is not a profile,
// which Validate refuses, counts as none); nil when none is set, and the
// runtime applies its default.
func AppArmorProfile(pod *corev1.Pod, c *corev1.Container) *corev1.AppArmorProfile {
	if c.SecurityContext != nil && c.SecurityContext.AppArmorProfile != nil {
		return c.SecurityContext.AppArmorProfile
	}
	if p := appArmorAnnotationProfile(pod.Annotations[corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix+c.Name]); p != nil {
		return p
	}
	if psc := pod.Spec.SecurityContext; psc != nil {
		return psc.AppArmorProfile
	}
	return nil
}

// appArmorAnnotationProfile is the field form of an annotation's value:
// runtime/default, unconfined or localhost/<name>; nil for anything else.
func appArmorAnnotationProfile(v string) *corev1.AppArmorProfile {
	switch {
	case v == corev1.DeprecatedAppArmorBetaProfileRuntimeDefault:
		return &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}
	case v == corev1.DeprecatedAppArmorBetaProfileNameUnconfined:
		return &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
	case strings.HasPrefix(v, corev1.DeprecatedAppArmorBetaProfileNamePrefix):
		name := strings.TrimPrefix(v, corev1.DeprecatedAppArmorBetaProfileNamePrefix)
		return &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: &name}
	}
	return nil
}

// appArmorNotEnabled is the kubelet's AppArmor admit refusal
// (validateHost's error behind its "Cannot enforce AppArmor" reason).
const appArmorNotEnabled = "Cannot enforce AppArmor: AppArmor is not enabled on the host"

// validateAppArmorAnnotations checks the deprecated per-container
// annotations as the API server does on create (ValidateAppArmorPodAnnotations:
// the container exists and the value is a profile; and, where the
// container's field or the pod's is set too, that both say the same) and
// as the kubelet admits them: a Localhost profile needs a name, and a
// profile other than unconfined needs AppArmor on the host.
func validateAppArmorAnnotations(pod *corev1.Pod, opts Options) field.ErrorList {
	ap := field.NewPath("metadata", "annotations")
	var errs field.ErrorList
	for _, k := range slices.Sorted(maps.Keys(pod.Annotations)) {
		name, ok := strings.CutPrefix(k, corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix)
		if !ok {
			continue
		}
		v, kp := pod.Annotations[k], ap.Key(k)
		c, cp := findContainer(&pod.Spec, name)
		if c == nil {
			errs = append(errs, field.Invalid(kp, name, "container not found"))
		}
		p := appArmorAnnotationProfile(v)
		switch {
		case v == "":
			// The API server accepts an empty value, the kubelet reads
			// no profile from it, yet its admission counts it as asking
			// for AppArmor (isRequired: anything but unconfined).
		case p == nil:
			errs = append(errs, field.Invalid(kp, v, fmt.Sprintf("invalid AppArmor profile name: %q", v)))
			continue
		case p.Type == corev1.AppArmorProfileTypeLocalhost && strings.TrimSpace(*p.LocalhostProfile) == "":
			errs = append(errs, field.Invalid(kp, v, "invalid empty AppArmor profile name"))
			continue
		}
		if c != nil && p != nil {
			errs = append(errs, appArmorFieldMatches(&pod.Spec, c, p, cp.Child("securityContext", "appArmorProfile"))...)
		}
		if v != corev1.DeprecatedAppArmorBetaProfileNameUnconfined && !opts.AppArmorEnabled {
			errs = append(errs, field.Forbidden(kp, appArmorNotEnabled))
		}
	}
	return errs
}

// appArmorFieldMatches is the API server's check, on create, that a
// container's annotation and its effective field (the container's, else
// the pod's) name the same profile, with its messages and paths.
func appArmorFieldMatches(s *corev1.PodSpec, c *corev1.Container, annotation *corev1.AppArmorProfile, fp *field.Path) field.ErrorList {
	var f *corev1.AppArmorProfile
	if c.SecurityContext != nil {
		f = c.SecurityContext.AppArmorProfile
	}
	if f == nil && s.SecurityContext != nil {
		f = s.SecurityContext.AppArmorProfile
	}
	switch {
	case f == nil:
		return nil
	case f.Type != annotation.Type:
		return field.ErrorList{field.Forbidden(fp.Child("type"), "apparmor type in annotation and field must match")}
	case f.Type == corev1.AppArmorProfileTypeLocalhost && (f.LocalhostProfile == nil || *f.LocalhostProfile != *annotation.LocalhostProfile):
		return field.ErrorList{field.Forbidden(fp.Child("localhostProfile"), "apparmor profile in annotation and field must match")}
	}
	return nil
}

// appArmorWarnings are the API server's warnings for the deprecated
// annotations.
func appArmorWarnings(pod *corev1.Pod) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(pod.Annotations)) {
		if strings.HasPrefix(k, corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix) {
			out = append(out, fmt.Sprintf("metadata.annotations[%s]: deprecated since v1.30; use the \"appArmorProfile\" field instead", k))
		}
	}
	return out
}

// findContainer returns the init or app container called name and its
// path.
func findContainer(s *corev1.PodSpec, name string) (*corev1.Container, *field.Path) {
	sp := field.NewPath("spec")
	for i := range s.InitContainers {
		if s.InitContainers[i].Name == name {
			return &s.InitContainers[i], sp.Child("initContainers").Index(i)
		}
	}
	for i := range s.Containers {
		if s.Containers[i].Name == name {
			return &s.Containers[i], sp.Child("containers").Index(i)
		}
	}
	return nil, nil
}
