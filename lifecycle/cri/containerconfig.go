package cri

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/cgroups/kubepods"
)

// The kubelet's default masked and read-only /proc and /sys paths for
// procMount Default (pkg/securitycontext/util.go, kept in sync with moby).
var (
	defaultMaskedPaths = []string{
		"/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
		"/sys/firmware", "/sys/devices/virtual/powercap",
	}
	defaultReadonlyPaths = []string{
		"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
	}
)

// ContainerOptions are what ContainerConfig needs beyond the pod and the
// container.
type ContainerOptions struct {
	// Image is the resolved image reference (the image ID from
	// EnsureImage); the container's own image name when empty.
	Image string
	// Attempt is the container's restart count: 0 first, +1 per restart.
	Attempt uint32
	// LogPath is the container's log file relative to the sandbox's
	// LogDirectory; ContainerLogPath(name, Attempt) when empty.
	LogPath string
	// Mounts are the container's volumes, prepared by the volume code.
	Mounts []*runtimeapi.Mount
	// Devices are the container's raw block volumes (volumeDevices),
	// mapped by the volume code.
	Devices []*runtimeapi.Device
	// OOMScoreAdj is the container's oom_score_adj (qos.OOMScoreAdj).
	OOMScoreAdj int64
	// PodIP is the sandbox's IP, for the status.podIP(s) fieldRefs.
	PodIP string
	// Node is the node's part of the downward API (spec.nodeName,
	// status.hostIP(s), allocatable for unset limits).
	Node NodeInfo
	// EnvSources reads the ConfigMaps and Secrets of envFrom,
	// configMapKeyRef and secretKeyRef; nil means none exist.
	EnvSources EnvSources
	// CgroupV2 asks, as the kubelet does on a unified host, that the
	// kernel kill the container's whole cgroup on OOM (memory.oom.group).
	CgroupV2 bool
	// EnforceCPULimits sets the CFS quota and period (the kubelet's
	// cpuCFSQuota, on by default). Off, neither is set.
	EnforceCPULimits bool
	// SeccompProfileRoot holds the Localhost seccomp profiles
	// (SeccompProfileRoot of the node's root directory).
	SeccompProfileRoot string
}

// ContainerLogPath is the kubelet's buildContainerLogsPath:
// "<container>/<attempt>.log", relative to the sandbox's log directory.
func ContainerLogPath(container string, attempt uint32) string {
	return filepath.Join(container, strconv.FormatUint(uint64(attempt), 10)+".log")
}

// ContainerConfig returns the CRI config of container c of pod as the
// kubelet's generateContainerConfig builds it:
//
//   - metadata name and attempt; image (opts.Image, with the pod's image
//     name as the user-specified one);
//   - command and args: the CRI Command is the container's command (the
//     image's entrypoint when empty) and Args its args, both with $(VAR)
//     references expanded from the container's environment ("$$" escapes,
//     unknown names stay as written);
//   - env as the kubelet's makeEnvironmentVariables (see containerEnv):
//     envFrom ConfigMaps and Secrets, then env values (expanded from the
//     variables before them), fieldRefs, resourceFieldRefs and
//     configMapKeyRef/secretKeyRef; a later variable of the same name
//     replaces an earlier one in its place;
//   - working dir, mounts, log path, stdin/tty off;
//   - labels io.kubernetes.pod.{name,namespace,uid}, io.kubernetes.container.name
//     and ManagedLabel; the kubelet's annotations (hash, restartCount,
//     termination message path and policy, grace periods, ports, type);
//   - linux resources as generateLinuxContainerResources (see
//     ContainerResources) with opts.OOMScoreAdj;
//   - the effective security context: the container's, falling back to the
//     pod's for runAsUser and runAsGroup; privileged, read-only rootfs,
//     capabilities (names without "CAP_", upper case, as CRI wants them),
//     no_new_privs when allowPrivilegeEscalation is false, the pod's
//     namespaces and supplemental groups, the default masked and read-only
//     paths; seccomp from the container's seccompProfile, else the pod's,
//     else Unconfined (the kubelet's default without --seccomp-default),
//     a Localhost profile beneath opts.SeccompProfileRoot; AppArmor from
//     podspec.AppArmorProfile (the container's appArmorProfile, else its
//     deprecated annotation, else the pod's), else none (the runtime's
//     default). runAsNonRoot is not the runtime's business: see
//     VerifyRunAsNonRoot.
//
// Env that cannot be resolved (a missing ConfigMap, Secret or key that is
// not optional) is a *ConfigError, the kubelet's CreateContainerConfigError;
// it wraps ErrUnsupportedField for a source nodeguard cannot resolve.
// Neither pod nor c is modified.
func ContainerConfig(pod *corev1.Pod, c *corev1.Container, opts ContainerOptions) (*runtimeapi.ContainerConfig, error) {
	env, err := containerEnv(pod, c, opts)
	if err != nil {
		return nil, &ConfigError{Container: c.Name, Err: err}
	}
	lookup := make(map[string]string, len(env))
	for _, kv := range env {
		lookup[kv.Key] = string(kv.Value)
	}
	image := opts.Image
	if image == "" {
		image = c.Image
	}
	logPath := opts.LogPath
	if logPath == "" {
		logPath = ContainerLogPath(c.Name, opts.Attempt)
	}
	res := ContainerResources(c, opts.CgroupV2, opts.EnforceCPULimits)
	res.OomScoreAdj = opts.OOMScoreAdj
	return &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: opts.Attempt},
		Image:       &runtimeapi.ImageSpec{Image: image, UserSpecifiedImage: c.Image},
		Command:     expandAll(c.Command, lookup),
		Args:        expandAll(c.Args, lookup),
		WorkingDir:  c.WorkingDir,
		Envs:        env,
		Mounts:      opts.Mounts,
		Devices:     opts.Devices,
		Labels:      containerLabels(pod, c),
		Annotations: containerAnnotations(pod, c, opts.Attempt),
		LogPath:     logPath,
		// What `nodeguard pod attach` connects to, as the kubelet passes
		// them.
		Stdin:     c.Stdin,
		StdinOnce: c.StdinOnce,
		Tty:       c.TTY,
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources:       res,
			SecurityContext: containerSecurityContext(pod, c, opts.SeccompProfileRoot),
		},
	}, nil
}

// ContainerResources returns c's Linux resources as the kubelet's
// generateLinuxContainerResources, without oom_score_adj:
//
//   - cpu_shares from the cpu request (the limit when only a limit is set),
//     1024 per CPU, at least 2 (also for no request);
//   - with enforceCPULimits, cpu_period 100000 µs and cpu_quota
//     limit*period/1000 (at least 1000 µs; 0, unlimited, without a limit);
//   - memory_limit_in_bytes from the memory limit (0, unlimited, without);
//   - on cgroup v2, unified memory.oom.group=1.
//
// Hugepage limits are not set: nodeguard refuses hugepage resources, and the
// kubelet's zero limits per page size would need the host's page sizes.
func ContainerResources(c *corev1.Container, cgroupV2, enforceCPULimits bool) *runtimeapi.LinuxContainerResources {
	var cpuRequest *resource.Quantity
	if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok {
		cpuRequest = &q
	}
	return linuxResources(cpuRequest, c.Resources.Limits.Cpu(), c.Resources.Limits.Memory(), enforceCPULimits, cgroupV2)
}

// linuxResources is the kubelet's calculateLinuxResources. A nil cpuRequest
// (not given) takes the limit; a given zero request means the minimum.
func linuxResources(cpuRequest, cpuLimit, memoryLimit *resource.Quantity, enforceCPULimits, cgroupV2 bool) *runtimeapi.LinuxContainerResources {
	r := &runtimeapi.LinuxContainerResources{}
	if cpuRequest == nil && !cpuLimit.IsZero() {
		r.CpuShares = int64(kubepods.MilliCPUToShares(cpuLimit.MilliValue()))
	} else {
		var milli int64
		if cpuRequest != nil {
			milli = cpuRequest.MilliValue()
		}
		r.CpuShares = int64(kubepods.MilliCPUToShares(milli))
	}
	if m := memoryLimit.Value(); m != 0 {
		r.MemoryLimitInBytes = m
	}
	if enforceCPULimits {
		r.CpuPeriod = kubepods.QuotaPeriod
		r.CpuQuota = kubepods.MilliCPUToQuota(cpuLimit.MilliValue(), kubepods.QuotaPeriod)
	}
	if cgroupV2 {
		r.Unified = map[string]string{"memory.oom.group": "1"}
	}
	return r
}

// containerSecurityContext is determineEffectiveSecurityContext for the
// fields nodeguard accepts.
func containerSecurityContext(pod *corev1.Pod, c *corev1.Container, seccompRoot string) *runtimeapi.LinuxContainerSecurityContext {
	out := &runtimeapi.LinuxContainerSecurityContext{
		NamespaceOptions: NamespaceOptions(pod),
		Seccomp:          seccompProfile(pod, c, seccompRoot),
	}
	out.Apparmor, out.ApparmorProfile = appArmorProfile(pod, c)
	psc := pod.Spec.SecurityContext
	if psc != nil {
		if psc.RunAsUser != nil {
			out.RunAsUser = &runtimeapi.Int64Value{Value: *psc.RunAsUser}
		}
		if psc.RunAsGroup != nil {
			out.RunAsGroup = &runtimeapi.Int64Value{Value: *psc.RunAsGroup}
		}
		out.SupplementalGroups = podSupplementalGroups(psc)
		out.SupplementalGroupsPolicy = supplementalGroupsPolicy(psc)
	}
	procMount := corev1.DefaultProcMount
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			out.RunAsUser = &runtimeapi.Int64Value{Value: *sc.RunAsUser}
		}
		if sc.RunAsGroup != nil {
			out.RunAsGroup = &runtimeapi.Int64Value{Value: *sc.RunAsGroup}
		}
		if sc.Privileged != nil {
			out.Privileged = *sc.Privileged
		}
		if sc.ReadOnlyRootFilesystem != nil {
			out.ReadonlyRootfs = *sc.ReadOnlyRootFilesystem
		}
		if sc.Capabilities != nil {
			out.Capabilities = &runtimeapi.Capability{
				AddCapabilities:  capabilityNames(sc.Capabilities.Add),
				DropCapabilities: capabilityNames(sc.Capabilities.Drop),
			}
		}
		if sc.AllowPrivilegeEscalation != nil {
			out.NoNewPrivs = !*sc.AllowPrivilegeEscalation
		}
		if sc.ProcMount != nil {
			procMount = *sc.ProcMount
		}
	}
	if procMount == corev1.UnmaskedProcMount {
		out.MaskedPaths, out.ReadonlyPaths = []string{}, []string{}
	} else {
		out.MaskedPaths = slices.Clone(defaultMaskedPaths)
		out.ReadonlyPaths = slices.Clone(defaultReadonlyPaths)
	}
	return out
}

// capabilityNames converts Kubernetes capability names to CRI's: upper
// case, without the "CAP_" prefix that the runtime adds itself (containerd
// turns "NET_ADMIN" into CAP_NET_ADMIN, and "CAP_NET_ADMIN" into the unknown
// CAP_CAP_NET_ADMIN). The kubelet passes names through as written; the API
// accepts both spellings, so only the bare one is safe. "ALL" stays.
func capabilityNames(caps []corev1.Capability) []string {
	out := make([]string, 0, len(caps))
	for _, c := range caps {
		out = append(out, strings.TrimPrefix(strings.ToUpper(string(c)), "CAP_"))
	}
	return out
}

func expandAll(in []string, vars map[string]string) []string {
	if in == nil {
		return nil
	}
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = expand(s, vars)
	}
	return out
}

// expand replaces $(NAME) references in s with vars[NAME], as Kubernetes
// does for env values, command and args (third_party/forked/golang/expansion):
// "$$" is a literal "$", a reference to an undefined name stays as written,
// and a "$" followed by anything else, or an unclosed "$(", is literal.
func expand(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString("$(")
				i++
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			i += 2 + end
		default:
			b.WriteByte('$')
			b.WriteByte(s[i+1])
			i++
		}
	}
	return b.String()
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
