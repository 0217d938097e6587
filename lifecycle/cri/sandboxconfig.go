package cri

import (
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle/podspec"
	"github.com/nodeguard/nodeguard/qos"
)

// Limits of a pod's resolv.conf that the kubelet enforces on the merged DNS
// config (formDNSConfigFitsLimits; validation.MaxDNSNameservers,
// MaxDNSSearchPaths, MaxDNSSearchListChars): glibc reads at most 3
// nameservers, and current glibc at most 32 search domains in 2048 bytes.
const (
	maxDNSNameservers     = 3
	maxDNSSearchPaths     = 32
	maxDNSSearchListChars = 2048
	// maxHostnameLen is the kernel's limit on a hostname (HOST_NAME_MAX).
	maxHostnameLen = 63
)

// noResolverDNS is what the kubelet gives a Default (or fallen-back
// ClusterFirst) pod when it has no resolver config (--resolv-conf=""): the
// local machine's resolver, no search. Used when SandboxOptions.DNS is nil.
func noResolverDNS() *runtimeapi.DNSConfig {
	return &runtimeapi.DNSConfig{Servers: []string{"127.0.0.1"}, Searches: []string{"."}}
}

// SandboxOptions are what SandboxConfig needs beyond the pod.
type SandboxOptions struct {
	// CgroupParent is the pod's cgroup (kubepods.PodParent). On the
	// development machines it is RELATIVE, resolved by runc against its own
	// cgroup in each hierarchy; RunPodSandbox refuses an empty one.
	CgroupParent string
	// LogDir is the sandbox's log directory; container log paths are
	// relative to it. The caller creates it.
	LogDir string
	// Attempt counts the pod's sandboxes: 0 for the first, +1 for each
	// re-creation.
	Attempt uint32
	// DNS is the node's resolver config (servers, searches, options as in
	// resolv.conf), the base for dnsPolicy Default and ClusterFirst. Nil
	// means no resolver config: 127.0.0.1 and search ".", as the kubelet.
	DNS *runtimeapi.DNSConfig
	// Hostname overrides the pod's hostname (spec.hostname, else its name).
	// Host-network pods never get one: they keep the node's.
	Hostname string
}

// SandboxConfig returns the CRI config of pod's sandbox as the kubelet's
// generatePodSandboxConfig builds it:
//
//   - metadata name, namespace, uid and attempt;
//   - labels: the pod's, the kubelet's io.kubernetes.pod.{name,namespace,uid}
//     and ManagedLabel; annotations: the pod's;
//   - hostname (not for host-network pods), log directory;
//   - DNS from dnsPolicy: None starts empty, Default starts from opts.DNS,
//     and so does ClusterFirst (and ClusterFirstWithHostNet), since
//     nodeguard has no cluster DNS and the kubelet falls back to Default
//     without one; then spec.dnsConfig is appended (duplicates dropped,
//     options by name overridden) and the result cut to resolv.conf's
//     limits. Always non-nil;
//   - a port mapping for every port of every app container, as
//     MakePortMappings (the runtime only maps those with a hostPort);
//   - linux: cgroup parent; namespaces (hostNetwork, hostPID, hostIPC give
//     NODE; otherwise POD network and IPC, and CONTAINER pid unless
//     shareProcessNamespace); privileged when any container is; the pod's
//     runAsUser, runAsGroup, supplemental groups, fsGroup and sysctls;
//     seccomp RuntimeDefault for the pause process (kubernetes#84623);
//   - linux resources from the pod's requests and limits as
//     calculateSandboxResources (informational: runtimes hand them to NRI,
//     the pod cgroup's limits are set by nodeguard).
//
// The pod is not modified.
func SandboxConfig(pod *corev1.Pod, opts SandboxOptions) *runtimeapi.PodSandboxConfig {
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{
			Name:      pod.Name,
			Namespace: pod.Namespace,
			Uid:       string(pod.UID),
			Attempt:   opts.Attempt,
		},
		Labels:       podLabels(pod),
		Annotations:  maps.Clone(pod.Annotations),
		LogDirectory: opts.LogDir,
		DnsConfig:    podDNS(pod, opts.DNS),
		PortMappings: portMappings(pod),
		Linux:        sandboxLinux(pod, opts.CgroupParent),
	}
	if cfg.Annotations == nil {
		cfg.Annotations = map[string]string{}
	}
	if !pod.Spec.HostNetwork {
		cfg.Hostname = opts.Hostname
		if cfg.Hostname == "" {
			cfg.Hostname = PodHostname(pod)
		}
	}
	return cfg
}

// PodHostname returns the hostname the kubelet gives pod
// (GeneratePodHostNameAndDomain): spec.hostname, else the pod's name, cut to
// 63 bytes without a trailing '-' or '.'.
func PodHostname(pod *corev1.Pod) string {
	h := pod.Name
	if pod.Spec.Hostname != "" {
		h = pod.Spec.Hostname
	}
	if len(h) > maxHostnameLen {
		h = strings.TrimRight(h[:maxHostnameLen], "-.")
	}
	return h
}

// NamespaceOptions returns the pod's namespace modes as the kubelet's
// NamespacesForPod: NODE for hostNetwork, hostPID and hostIPC; otherwise POD
// network and IPC, and CONTAINER pid (POD with shareProcessNamespace).
func NamespaceOptions(pod *corev1.Pod) *runtimeapi.NamespaceOption {
	ns := &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_POD,
		Pid:     runtimeapi.NamespaceMode_CONTAINER,
		Ipc:     runtimeapi.NamespaceMode_POD,
	}
	if pod.Spec.HostNetwork {
		ns.Network = runtimeapi.NamespaceMode_NODE
	}
	switch {
	case pod.Spec.HostPID:
		ns.Pid = runtimeapi.NamespaceMode_NODE
	case pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace:
		ns.Pid = runtimeapi.NamespaceMode_POD
	}
	if pod.Spec.HostIPC {
		ns.Ipc = runtimeapi.NamespaceMode_NODE
	}
	return ns
}

func sandboxLinux(pod *corev1.Pod, cgroupParent string) *runtimeapi.LinuxPodSandboxConfig {
	sc := &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: NamespaceOptions(pod),
		Privileged:       hasPrivilegedContainer(pod),
		Seccomp:          &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
	}
	lc := &runtimeapi.LinuxPodSandboxConfig{
		CgroupParent:    cgroupParent,
		SecurityContext: sc,
		Sysctls:         map[string]string{},
		Resources:       sandboxResources(pod),
	}
	if psc := pod.Spec.SecurityContext; psc != nil {
		if psc.RunAsUser != nil {
			sc.RunAsUser = &runtimeapi.Int64Value{Value: *psc.RunAsUser}
		}
		if psc.RunAsGroup != nil {
			sc.RunAsGroup = &runtimeapi.Int64Value{Value: *psc.RunAsGroup}
		}
		sc.SupplementalGroups = podSupplementalGroups(psc)
		sc.SupplementalGroupsPolicy = supplementalGroupsPolicy(psc)
		for _, s := range psc.Sysctls {
			// One spelling for the runtime: runc writes a dotted name
			// to /proc/sys with the dots made slashes.
			lc.Sysctls[podspec.NormalizeSysctl(s.Name)] = s.Value
		}
	}
	return lc
}

// podSupplementalGroups are fsGroup, then the supplemental groups, as the
// kubelet lists them.
func podSupplementalGroups(psc *corev1.PodSecurityContext) []int64 {
	var g []int64
	if psc.FSGroup != nil {
		g = append(g, *psc.FSGroup)
	}
	g = append(g, psc.SupplementalGroups...)
	return g
}

func hasPrivilegedContainer(pod *corev1.Pod) bool {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			sc := list[i].SecurityContext
			if sc != nil && sc.Privileged != nil && *sc.Privileged {
				return true
			}
		}
	}
	return false
}

// sandboxResources is calculateSandboxResources: the pod's effective requests
// and limits (init containers and sidecars counted as the scheduler does)
// through the same conversion as a container's, without oom_score_adj.
func sandboxResources(pod *corev1.Pod) *runtimeapi.LinuxContainerResources {
	req := qos.PodRequests(pod)
	lim := qos.PodLimits(pod)
	var cpuRequest *resource.Quantity
	if q, ok := req[corev1.ResourceCPU]; ok {
		cpuRequest = &q
	}
	return linuxResources(cpuRequest, lim.Cpu(), lim.Memory(), true, false)
}

// portMappings is the kubelet's loop over MakePortMappings: every port of
// every app container, skipping a port that repeats another of the same
// container (same name, or without a name the same family, protocol, host
// IP and ports).
func portMappings(pod *corev1.Pod) []*runtimeapi.PortMapping {
	var out []*runtimeapi.PortMapping
	for i := range pod.Spec.Containers {
		seen := map[string]bool{}
		for _, p := range pod.Spec.Containers[i].Ports {
			key := p.Name
			if key == "" {
				family := "any"
				if p.HostIP != "" {
					family = "v4"
					if strings.Contains(p.HostIP, ":") {
						family = "v6"
					}
				}
				key = strings.Join([]string{family, string(p.Protocol), p.HostIP,
					itoa(int64(p.ContainerPort)), itoa(int64(p.HostPort))}, "-")
			}
			if seen[key] {
				continue
			}
			seen[key] = true
			out = append(out, &runtimeapi.PortMapping{
				Protocol:      runtimeProtocol(p.Protocol),
				ContainerPort: p.ContainerPort,
				HostPort:      p.HostPort,
				HostIp:        p.HostIP,
			})
		}
	}
	return out
}

// runtimeProtocol is toRuntimeProtocol: TCP for anything unknown (the API
// server defaults an empty protocol to TCP).
func runtimeProtocol(p corev1.Protocol) runtimeapi.Protocol {
	switch p {
	case corev1.ProtocolUDP:
		return runtimeapi.Protocol_UDP
	case corev1.ProtocolSCTP:
		return runtimeapi.Protocol_SCTP
	}
	return runtimeapi.Protocol_TCP
}

// podDNS is the kubelet's GetPodDNS with the node's config in base and no
// cluster DNS. Options keep their order (the kubelet's map loses it); a pod
// option replaces a base option of the same name in place.
func podDNS(pod *corev1.Pod, base *runtimeapi.DNSConfig) *runtimeapi.DNSConfig {
	var cfg *runtimeapi.DNSConfig
	switch {
	case pod.Spec.DNSPolicy == corev1.DNSNone:
		cfg = &runtimeapi.DNSConfig{}
	case base == nil:
		cfg = noResolverDNS()
	default:
		cfg = &runtimeapi.DNSConfig{
			Servers:  slices.Clone(base.Servers),
			Searches: slices.Clone(base.Searches),
			Options:  slices.Clone(base.Options),
		}
	}
	if pc := pod.Spec.DNSConfig; pc != nil {
		cfg.Servers = appendUnique(cfg.Servers, pc.Nameservers...)
		cfg.Searches = appendUnique(cfg.Searches, pc.Searches...)
		cfg.Options = mergeDNSOptions(cfg.Options, pc.Options)
	}
	if len(cfg.Servers) > maxDNSNameservers {
		cfg.Servers = cfg.Servers[:maxDNSNameservers]
	}
	cfg.Searches = fitSearches(cfg.Searches)
	return cfg
}

// appendUnique appends each of add not already in list (or earlier in add).
func appendUnique(list []string, add ...string) []string {
	out := make([]string, 0, len(list)+len(add))
	seen := map[string]bool{}
	for _, s := range append(slices.Clone(list), add...) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

func mergeDNSOptions(base []string, pod []corev1.PodDNSConfigOption) []string {
	out := slices.Clone(base)
	name := func(opt string) string { n, _, _ := strings.Cut(opt, ":"); return n }
	for _, o := range pod {
		opt := o.Name
		if o.Value != nil && *o.Value != "" {
			opt += ":" + *o.Value
		}
		i := slices.IndexFunc(out, func(s string) bool { return name(s) == o.Name })
		if i >= 0 {
			out[i] = opt
			continue
		}
		out = append(out, opt)
	}
	// Drop later duplicates of a name (a base with "ndots:1 ndots:2").
	seen := map[string]bool{}
	return slices.DeleteFunc(out, func(s string) bool {
		n := name(s)
		dup := seen[n]
		seen[n] = true
		return dup
	})
}

// fitSearches keeps the leading search domains that fit resolv.conf's
// limits.
func fitSearches(s []string) []string {
	n, chars := 0, 0
	for n < len(s) && n < maxDNSSearchPaths {
		c := chars + len(s[n])
		if n > 0 {
			c++ // the separating space
		}
		if c > maxDNSSearchListChars {
			break
		}
		chars = c
		n++
	}
	return s[:n]
}
