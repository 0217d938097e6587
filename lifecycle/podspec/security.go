package podspec

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// safeSysctls is the kubelet's safe set (pkg/kubelet/sysctl
// safe_sysctls.go): namespaced, and unable to affect other pods or the
// node. Every other sysctl needs Options.AllowedUnsafeSysctls.
var safeSysctls = []string{
	"kernel.shm_rmid_forced",
	"net.ipv4.ip_local_port_range",
	"net.ipv4.tcp_syncookies",
	"net.ipv4.ping_group_range",
	"net.ipv4.ip_unprivileged_port_start",
	"net.ipv4.ip_local_reserved_ports",
	"net.ipv4.tcp_keepalive_time",
	"net.ipv4.tcp_fin_timeout",
	"net.ipv4.tcp_keepalive_intvl",
	"net.ipv4.tcp_keepalive_probes",
	"net.ipv4.tcp_rmem",
	"net.ipv4.tcp_wmem",
}

// namespacedSysctlPrefixes are the groups the kernel namespaces (the
// kubelet's sysctl.GetNamespace): only these can be set for one pod. A
// net.* sysctl is per network namespace, which a host-network pod shares
// with the node.
var namespacedSysctlPrefixes = []struct {
	prefix string
	net    bool
}{
	{"kernel.shm", false}, {"kernel.msg", false}, {"kernel.sem", false},
	{"fs.mqueue.", false}, {"net.", true},
}

// NormalizeSysctl is the kubelet's NormalizeName: a sysctl may be written
// with '/' as its separator ("net/ipv4/tcp_syncookies"); the first
// separator decides, and the name is returned with '.'.
func NormalizeSysctl(name string) string {
	i := strings.IndexAny(name, "./")
	if i < 0 || name[i] == '.' {
		return name
	}
	// "/" separated: dots inside a component (an interface name) become
	// slashes, as in /proc/sys, then the separators dots.
	return strings.Map(func(r rune) rune {
		switch r {
		case '.':
			return '/'
		case '/':
			return '.'
		}
		return r
	}, name)
}

// unsafeSysctlAllowed reports whether name matches one of allowed, each a
// full name or a prefix ending in '*' (the kubelet's
// --allowed-unsafe-sysctls patterns, "net.core.*").
func unsafeSysctlAllowed(name string, allowed []string) bool {
	for _, p := range allowed {
		p = NormalizeSysctl(p)
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(name, prefix) {
				return true
			}
		} else if p == name {
			return true
		}
	}
	return false
}

// SupplementalGroupsPolicyNotSupported is the kubelet's admission reason
// for a pod with supplementalGroupsPolicy Strict on a node whose runtime
// lacks the feature; the refusal starts with it.
const SupplementalGroupsPolicyNotSupported = "SupplementalGroupsPolicyNotSupported"

// ErrUnsafeSysctlPattern is wrapped for an allowedUnsafeSysctls entry the
// kubelet would refuse at start.
var ErrUnsafeSysctlPattern = errors.New("invalid unsafe sysctl pattern")

// CheckUnsafeSysctlPattern is the kubelet's check of an
// allowedUnsafeSysctls entry: a sysctl name or a prefix ending in '*', in
// a namespaced group (kernel.shm*, kernel.msg*, kernel.sem, fs.mqueue.*,
// net.*), since only those can differ between pods.
func CheckUnsafeSysctlPattern(p string) error {
	name := NormalizeSysctl(p)
	prefix, wild := strings.CutSuffix(name, "*")
	switch {
	case prefix == "" || strings.Contains(prefix, "*"):
		return fmt.Errorf("%q: %w: a name, or a prefix ending in one '*'", p, ErrUnsafeSysctlPattern)
	case namespacedSysctl(prefix) < 0:
		what := "sysctl"
		if wild {
			what = "sysctl pattern"
		}
		return fmt.Errorf("%q: %w: the %s is not known to be namespaced", p, ErrUnsafeSysctlPattern, what)
	}
	return nil
}

// namespacedSysctl is the index in namespacedSysctlPrefixes of the group
// of name, -1 for none.
func namespacedSysctl(name string) int {
	for i, p := range namespacedSysctlPrefixes {
		if strings.HasPrefix(name, p.prefix) {
			return i
		}
	}
	return -1
}

// validatePodSecurityContext checks what the pod securityContext carries
// beyond the IDs: sysctls against the node's policy (the kubelet's sysctl
// admit handler, with its messages), seccomp and AppArmor profiles, the
// supplemental groups and their policy.
func validatePodSecurityContext(s *corev1.PodSpec, opts Options, sp *field.Path) field.ErrorList {
	sc := s.SecurityContext
	if sc == nil {
		return nil
	}
	var errs field.ErrorList
	for i, g := range sc.SupplementalGroups {
		for _, msg := range validation.IsValidGroupID(g) {
			errs = append(errs, field.Invalid(sp.Child("supplementalGroups").Index(i), g, msg))
		}
	}
	switch p := sc.SupplementalGroupsPolicy; {
	case p == nil, *p == corev1.SupplementalGroupsPolicyMerge:
	case *p == corev1.SupplementalGroupsPolicyStrict:
		// The kubelet refuses Strict where the runtime does not report
		// the feature (its canAdmitPod, reason and message below): a
		// runtime without it would merge the image's groups anyway.
		if !opts.SupplementalGroupsPolicy {
			errs = append(errs, field.Forbidden(sp.Child("supplementalGroupsPolicy"), SupplementalGroupsPolicyNotSupported+": SupplementalGroupsPolicy=Strict is not supported in this node: the container runtime does not report the supplemental_groups_policy feature"))
		}
	default:
		errs = append(errs, field.NotSupported(sp.Child("supplementalGroupsPolicy"), *p,
			[]corev1.SupplementalGroupsPolicy{corev1.SupplementalGroupsPolicyMerge, corev1.SupplementalGroupsPolicyStrict}))
	}
	if sc.FSGroup != nil {
		for _, msg := range validation.IsValidGroupID(*sc.FSGroup) {
			errs = append(errs, field.Invalid(sp.Child("fsGroup"), *sc.FSGroup, msg))
		}
	}
	switch p := sc.FSGroupChangePolicy; {
	case p == nil, *p == corev1.FSGroupChangeAlways, *p == corev1.FSGroupChangeOnRootMismatch:
	default:
		errs = append(errs, field.NotSupported(sp.Child("fsGroupChangePolicy"), *p,
			[]corev1.PodFSGroupChangePolicy{corev1.FSGroupChangeOnRootMismatch, corev1.FSGroupChangeAlways}))
	}
	seen := map[string]bool{}
	for i, sysctl := range sc.Sysctls {
		ip := sp.Child("sysctls").Index(i)
		name := NormalizeSysctl(sysctl.Name)
		switch {
		case sysctl.Name == "":
			errs = append(errs, field.Required(ip.Child("name"), ""))
			continue
		case seen[name]:
			errs = append(errs, field.Duplicate(ip.Child("name"), sysctl.Name))
			continue
		}
		seen[name] = true
		ns := namespacedSysctl(name)
		switch {
		case ns < 0:
			errs = append(errs, field.Forbidden(ip, "sysctl \""+sysctl.Name+"\" is not known to be namespaced"))
		case namespacedSysctlPrefixes[ns].net && s.HostNetwork:
			errs = append(errs, field.Forbidden(ip, "sysctl \""+sysctl.Name+"\" not allowed with host net enabled"))
		case !slices.Contains(safeSysctls, name) && !unsafeSysctlAllowed(name, opts.AllowedUnsafeSysctls):
			errs = append(errs, field.Forbidden(ip, "forbidden sysctl: \""+sysctl.Name+"\" not allowlisted (allowedUnsafeSysctls)"))
		}
	}
	errs = append(errs, validateSeccomp(sc.SeccompProfile, sp.Child("seccompProfile"))...)
	errs = append(errs, validateAppArmor(sc.AppArmorProfile, opts, sp.Child("appArmorProfile"))...)
	return errs
}

// validateSeccomp is validateSeccompProfileField: Localhost needs a
// relative profile path without "..", beneath the kubelet's
// seccompProfileRoot; the others take none.
func validateSeccomp(p *corev1.SeccompProfile, fp *field.Path) field.ErrorList {
	if p == nil {
		return nil
	}
	var errs field.ErrorList
	switch p.Type {
	case corev1.SeccompProfileTypeLocalhost:
		lp := fp.Child("localhostProfile")
		switch {
		case p.LocalhostProfile == nil || *p.LocalhostProfile == "":
			errs = append(errs, field.Required(lp, "must be set when seccomp type is Localhost"))
		default:
			errs = append(errs, validateLocalDescendingPath(*p.LocalhostProfile, lp)...)
		}
	case corev1.SeccompProfileTypeRuntimeDefault, corev1.SeccompProfileTypeUnconfined:
		if p.LocalhostProfile != nil {
			errs = append(errs, field.Invalid(fp.Child("localhostProfile"), *p.LocalhostProfile, "can only be set when seccomp type is Localhost"))
		}
	case "":
		errs = append(errs, field.Required(fp.Child("type"), ""))
	default:
		errs = append(errs, field.NotSupported(fp.Child("type"), p.Type, []corev1.SeccompProfileType{
			corev1.SeccompProfileTypeLocalhost, corev1.SeccompProfileTypeRuntimeDefault, corev1.SeccompProfileTypeUnconfined}))
	}
	return errs
}

// validateAppArmor is validateAppArmorProfileField plus the kubelet's
// AppArmor admit handler: a profile on a node without AppArmor is refused,
// with the kubelet's reason, instead of running unconfined.
func validateAppArmor(p *corev1.AppArmorProfile, opts Options, fp *field.Path) field.ErrorList {
	if p == nil {
		return nil
	}
	var errs field.ErrorList
	switch p.Type {
	case corev1.AppArmorProfileTypeLocalhost:
		if p.LocalhostProfile == nil || strings.TrimSpace(*p.LocalhostProfile) == "" {
			errs = append(errs, field.Required(fp.Child("localhostProfile"), "must be set when AppArmor type is Localhost"))
		}
	case corev1.AppArmorProfileTypeRuntimeDefault, corev1.AppArmorProfileTypeUnconfined:
		if p.LocalhostProfile != nil {
			errs = append(errs, field.Invalid(fp.Child("localhostProfile"), *p.LocalhostProfile, "can only be set when AppArmor type is Localhost"))
		}
	case "":
		errs = append(errs, field.Required(fp.Child("type"), ""))
	default:
		errs = append(errs, field.NotSupported(fp.Child("type"), p.Type, []corev1.AppArmorProfileType{
			corev1.AppArmorProfileTypeLocalhost, corev1.AppArmorProfileTypeRuntimeDefault, corev1.AppArmorProfileTypeUnconfined}))
	}
	if len(errs) == 0 && p.Type != corev1.AppArmorProfileTypeUnconfined && !opts.AppArmorEnabled {
		errs = append(errs, field.Forbidden(fp, appArmorNotEnabled))
	}
	return errs
}

// validateLocalDescendingPath is the API server's check of a path that
// must stay beneath a root: relative, without "..".
func validateLocalDescendingPath(p string, fp *field.Path) field.ErrorList {
	var errs field.ErrorList
	if filepath.IsAbs(p) {
		errs = append(errs, field.Invalid(fp, p, "must be a relative path"))
	}
	if slices.Contains(strings.Split(filepath.ToSlash(p), "/"), "..") {
		errs = append(errs, field.Invalid(fp, p, "must not contain '..'"))
	}
	return errs
}

// isCapability reports whether name is a Linux capability as the API
// server and the runtimes accept it: in any case, with or without "CAP_"
// (CoreDNS drops "all").
func isCapability(name corev1.Capability) bool {
	n := strings.ToUpper(string(name))
	return slices.Contains(capabilities, strings.TrimPrefix(n, "CAP_"))
}
