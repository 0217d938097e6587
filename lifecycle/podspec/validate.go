package podspec

import (
	"fmt"
	"math"
	"net/netip"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/nodeguard/nodeguard/qos"
)

// Options is the node policy Validate checks pods against.
type Options struct {
	// PriorityClasses maps priority class names to their values. The
	// built-in system-node-critical and system-cluster-critical always
	// exist and cannot be redefined.
	PriorityClasses map[string]int32
	// AllowPrivileged lets containers run privileged (the kubelet's
	// --allow-privileged).
	AllowPrivileged bool
	// ImagePull says that the node pulls images (nodeguard's imagePull):
	// without it imagePullPolicy Always, a pull at every start, cannot be
	// honoured and is refused.
	ImagePull bool
	// AllowedUnsafeSysctls lets pods set these sysctls beyond the safe
	// set, each a name or a prefix ending in '*' (the kubelet's
	// allowedUnsafeSysctls). Non-namespaced sysctls stay refused.
	AllowedUnsafeSysctls []string
	// AppArmorEnabled says that the kernel enforces AppArmor
	// (/sys/module/apparmor/parameters/enabled is "Y"); without it an
	// appArmorProfile other than Unconfined is refused.
	AppArmorEnabled bool
	// SupplementalGroupsPolicy says that the runtime reports the
	// supplemental_groups_policy feature (CRI StatusResponse features);
	// without it supplementalGroupsPolicy Strict is refused, as the
	// kubelet refuses it at admission.
	SupplementalGroupsPolicy bool
	// ImageVolumes says that the runtime mounts image volumes (CRI
	// Mount.image, lifecycle/cri's ImageVolumesOf), ImageVolumeSubPath
	// that it mounts a subPath of one (Mount.image_sub_path). Without
	// them a pod with an image volume, or a subPath of one, is refused,
	// naming Runtime: a runtime that predates the fields ignores them and
	// would give the container an empty directory.
	ImageVolumes, ImageVolumeSubPath bool
	// Runtime names the runtime and its version ("containerd
	// 1.6.20~ds1"), for those refusals.
	Runtime string
	// ServiceAccountTokens says that a control plane issues service
	// account tokens (node mode): projected serviceAccountToken sources
	// are mounted instead of refused.
	ServiceAccountTokens bool
	// ClusterPriorityClasses (node mode): a priorityClassName neither
	// built in nor configured is a cluster's, and the spec.priority its
	// API server's admission set is taken.
	ClusterPriorityClasses bool
	// ReadinessGates (node mode): spec.readinessGates are accepted; the
	// conditions they name are set in the API by their controllers, and
	// the pod is Ready in the API only once they are True (kubenode).
	ReadinessGates bool
}

// DNS limits from Linux libc resolution (pkg/apis/core/validation).
const (
	maxDNSNameservers     = 3
	maxDNSSearchPaths     = 32
	maxDNSSearchListChars = 2048
	// maxUIDLen bounds metadata.uid so that "pod"+uid fits a cgroup name.
	maxUIDLen = 128
	// fileModeMax is the largest volume file mode (0777).
	fileModeMax        = 0o777
	fileModeErrorMsg   = "must be a number between 0 and 0777 (octal), both inclusive"
	isNegativeErrorMsg = "must be greater than or equal to 0"
)

var (
	supportedResources       = []string{string(corev1.ResourceCPU), string(corev1.ResourceEphemeralStorage), string(corev1.ResourceMemory)}
	supportedProtocols       = []string{string(corev1.ProtocolSCTP), string(corev1.ProtocolTCP), string(corev1.ProtocolUDP)}
	supportedRestartPolicies = []corev1.RestartPolicy{corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever}
	supportedDNSPolicies     = []string{string(corev1.DNSClusterFirstWithHostNet), string(corev1.DNSClusterFirst), string(corev1.DNSDefault), string(corev1.DNSNone)}
	supportedPullPolicies    = []string{string(corev1.PullAlways), string(corev1.PullIfNotPresent), string(corev1.PullNever)}
	supportedPropagations    = []string{string(corev1.MountPropagationBidirectional), string(corev1.MountPropagationHostToContainer), string(corev1.MountPropagationNone)}
	supportedHostPathTypes   = []string{"", "BlockDevice", "CharDevice", "Directory", "DirectoryOrCreate", "File", "FileOrCreate", "Socket"}
	supportedMedia           = []string{string(corev1.StorageMediumDefault), string(corev1.StorageMediumMemory)}
	// The downward API fields nodeguard can fill in for env; a label or an
	// annotation by key too (metadata.labels['<key>']).
	supportedEnvFieldPaths = []string{"metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName",
		"spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs"}
	// The resources a resourceFieldRef may name (validContainerResourceFieldPathExpressions
	// without hugepages, which nodeguard does not manage).
	supportedEnvResources = []string{"limits.cpu", "limits.ephemeral-storage", "limits.memory",
		"requests.cpu", "requests.ephemeral-storage", "requests.memory"}
	cpuDivisors    = []string{"1m", "1"}
	memoryDivisors = []string{"1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti", "1Pi", "1Ei"}
	// The downward API fields of volumes (validVolumeDownwardAPIFieldPathExpressions),
	// and a label or an annotation by key.
	supportedVolumeFieldPaths = []string{"metadata.annotations", "metadata.labels", "metadata.name", "metadata.namespace", "metadata.uid"}
	// The fields a fieldPath may subscript with ['<key>'].
	subscriptedFieldPaths = []string{"metadata.annotations", "metadata.labels"}
	// Linux capabilities up to CAP_CHECKPOINT_RESTORE (Linux 5.9), and ALL.
	capabilities = []string{
		"ALL", "AUDIT_CONTROL", "AUDIT_READ", "AUDIT_WRITE", "BLOCK_SUSPEND", "BPF", "CHECKPOINT_RESTORE",
		"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "IPC_LOCK", "IPC_OWNER", "KILL",
		"LEASE", "LINUX_IMMUTABLE", "MAC_ADMIN", "MAC_OVERRIDE", "MKNOD", "NET_ADMIN", "NET_BIND_SERVICE",
		"NET_BROADCAST", "NET_RAW", "PERFMON", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYSLOG",
		"SYS_ADMIN", "SYS_BOOT", "SYS_CHROOT", "SYS_MODULE", "SYS_NICE", "SYS_PACCT", "SYS_PTRACE",
		"SYS_RAWIO", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "WAKE_ALARM",
	}
)

// Validate checks a (defaulted) pod as the API server would on create
// (pkg/apis/core/validation ValidatePodCreate, with the messages and field
// paths it uses) and against what nodeguard supports and the node's policy.
// Warnings name fields that are accepted but have no effect (scheduling
// fields, fields an API server sets); errors name everything that stops the
// pod from running as written. See the package documentation for the
// supported fields. Validate does not modify the pod.
func Validate(pod *corev1.Pod, opts Options) (warnings []string, errs field.ErrorList) {
	if pod.APIVersion != "" && pod.APIVersion != "v1" {
		errs = append(errs, field.NotSupported(field.NewPath("apiVersion"), pod.APIVersion, []string{"v1"}))
	}
	if pod.Kind != "" && pod.Kind != "Pod" {
		errs = append(errs, field.NotSupported(field.NewPath("kind"), pod.Kind, []string{"Pod"}))
	}
	warnings, unsupported := checkSupport(pod)
	for _, e := range unsupported {
		if opts.ServiceAccountTokens && strings.HasSuffix(e.Field, ".serviceAccountToken") && strings.Contains(e.Field, ".projected.sources[") {
			continue // issued through the control plane
		}
		if opts.ReadinessGates && e.Field == "spec.readinessGates" {
			continue // their conditions come through the control plane
		}
		errs = append(errs, e)
	}
	warnings = append(warnings, lifecycleWarnings(&pod.Spec)...)
	if len(pod.Spec.ImagePullSecrets) > 0 && !opts.ImagePull {
		// Harmless: nothing is pulled, so no credentials are needed.
		warnings = append(warnings, "spec.imagePullSecrets: ignored: this node does not pull images (imagePull: false in nodeguard's config)")
	}
	errs = append(errs, validateMetadata(pod)...)
	warnings = append(warnings, appArmorWarnings(pod)...)
	errs = append(errs, validateAppArmorAnnotations(pod, opts)...)
	errs = append(errs, validateSpec(&pod.Spec, opts, field.NewPath("spec"))...)
	if _, err := ResolvePriority(pod, opts); err != nil {
		errs = append(errs, err)
	}
	return warnings, errs
}

func validateMetadata(pod *corev1.Pod) field.ErrorList {
	mp := field.NewPath("metadata")
	errs := apivalidation.ValidateObjectMeta(&pod.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, mp)
	uid := string(pod.UID)
	switch {
	case uid == "":
		errs = append(errs, field.Required(mp.Child("uid"), "Parse and Default set it"))
	case len(uid) > maxUIDLen || strings.Trim(uid, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") != "":
		errs = append(errs, field.Invalid(mp.Child("uid"), uid,
			fmt.Sprintf("must consist of at most %d ASCII letters, digits and '-' (it names the pod's cgroup)", maxUIDLen)))
	}
	return errs
}

func validateSpec(s *corev1.PodSpec, opts Options, sp *field.Path) field.ErrorList {
	var errs field.ErrorList
	volumes, verrs := validateVolumes(s.Volumes, sp.Child("volumes"))
	errs = append(errs, verrs...)

	if len(s.Containers) == 0 {
		errs = append(errs, field.Required(sp.Child("containers"), ""))
	}
	names := map[string]bool{}
	for i := range s.Containers {
		errs = append(errs, validateContainer(&s.Containers[i], names, volumes, opts, sp.Child("containers").Index(i))...)
		errs = append(errs, validateLifecycle(&s.Containers[i], s.TerminationGracePeriodSeconds, sp.Child("containers").Index(i))...)
		errs = append(errs, validateRestartPolicy(&s.Containers[i], false, sp.Child("containers").Index(i))...)
	}
	for i := range s.InitContainers {
		c, cp := &s.InitContainers[i], sp.Child("initContainers").Index(i)
		errs = append(errs, validateContainer(c, names, volumes, opts, cp)...)
		errs = append(errs, validateRestartPolicy(c, true, cp)...)
		if !isSidecar(c) {
			errs = append(errs, noInitProbes(c, cp)...)
		}
		errs = append(errs, noInitLifecycle(c, cp)...)
		errs = append(errs, validateLifecycle(c, s.TerminationGracePeriodSeconds, cp)...)
	}
	errs = append(errs, validateImageVolumes(s, opts, sp)...)
	claims := map[string]bool{}
	for _, v := range s.Volumes {
		if v.PersistentVolumeClaim != nil {
			claims[v.Name] = true
		}
	}
	for i := range s.Containers {
		errs = append(errs, validateDevices(&s.Containers[i], volumes, claims, sp.Child("containers").Index(i))...)
	}
	for i := range s.InitContainers {
		errs = append(errs, validateDevices(&s.InitContainers[i], volumes, claims, sp.Child("initContainers").Index(i))...)
	}
	errs = append(errs, uniqueHostPorts(s.Containers, sp.Child("containers"))...)
	if s.HostNetwork {
		for _, list := range []struct {
			cs []corev1.Container
			p  *field.Path
		}{{s.Containers, sp.Child("containers")}, {s.InitContainers, sp.Child("initContainers")}} {
			for i, c := range list.cs {
				for j, port := range c.Ports {
					if port.HostPort != port.ContainerPort {
						errs = append(errs, field.Invalid(list.p.Index(i).Child("ports").Index(j).Child("containerPort"),
							port.ContainerPort, "must match `hostPort` when `hostNetwork` is true"))
					}
				}
			}
		}
	}

	switch s.RestartPolicy {
	case corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever:
	case "":
		errs = append(errs, field.Required(sp.Child("restartPolicy"), ""))
	default:
		errs = append(errs, field.NotSupported(sp.Child("restartPolicy"), s.RestartPolicy, supportedRestartPolicies))
	}
	if g := s.TerminationGracePeriodSeconds; g != nil && *g < 0 {
		errs = append(errs, field.Invalid(sp.Child("terminationGracePeriodSeconds"), *g, isNegativeErrorMsg))
	}
	errs = append(errs, validateDNS(s, sp)...)
	if s.Hostname != "" {
		errs = append(errs, dns1123Label(s.Hostname, sp.Child("hostname"))...)
	}
	if s.Subdomain != "" {
		errs = append(errs, dns1123Label(s.Subdomain, sp.Child("subdomain"))...)
	}
	if sc := s.SecurityContext; sc != nil {
		errs = append(errs, validateIDs(sc.RunAsUser, sc.RunAsGroup, sp.Child("securityContext"))...)
	}
	errs = append(errs, validatePodSecurityContext(s, opts, sp.Child("securityContext"))...)
	if s.OS != nil && s.OS.Name != corev1.Linux {
		errs = append(errs, field.NotSupported(sp.Child("os", "name"), s.OS.Name, []corev1.OSName{corev1.Linux}))
	}
	forbidTrue := func(v *bool, name, why string) {
		if v != nil && *v {
			errs = append(errs, field.Forbidden(sp.Child(name), NotSupported+": "+why))
		}
	}
	forbidTrue(s.SetHostnameAsFQDN, "setHostnameAsFQDN", "the hostname is the pod's hostname")
	if s.HostUsers != nil && !*s.HostUsers {
		errs = append(errs, field.Forbidden(sp.Child("hostUsers"), NotSupported+": user namespaces"))
	}
	if s.PriorityClassName != "" {
		for _, msg := range apivalidation.NameIsDNSSubdomain(s.PriorityClassName, false) {
			errs = append(errs, field.Invalid(sp.Child("priorityClassName"), s.PriorityClassName, msg))
		}
	}
	errs = append(errs, validateWorkloadFields(s, opts, sp)...)
	return errs
}

// validateWorkloadFields checks the pod-level fields a standalone kubelet
// accepts beyond containers and volumes, as ValidatePodSpec and
// ValidatePodSecurityContext do, and the host namespaces against the node's
// policy.
func validateWorkloadFields(s *corev1.PodSpec, opts Options, sp *field.Path) field.ErrorList {
	var errs field.ErrorList
	if d := s.ActiveDeadlineSeconds; d != nil && (*d < 1 || *d > math.MaxInt32) {
		errs = append(errs, field.Invalid(sp.Child("activeDeadlineSeconds"), *d, validation.InclusiveRangeError(1, math.MaxInt32)))
	}
	for _, sa := range []struct{ name, field string }{{s.ServiceAccountName, "serviceAccountName"}, {s.DeprecatedServiceAccount, "serviceAccount"}} {
		if sa.name == "" {
			continue
		}
		for _, msg := range apivalidation.NameIsDNSSubdomain(sa.name, false) {
			errs = append(errs, field.Invalid(sp.Child(sa.field), sa.name, msg))
		}
	}
	for i, a := range s.HostAliases {
		ap := sp.Child("hostAliases").Index(i)
		errs = append(errs, validation.IsValidIP(ap.Child("ip"), a.IP)...)
		for j, h := range a.Hostnames {
			for _, msg := range validation.IsDNS1123Subdomain(h) {
				errs = append(errs, field.Invalid(ap.Child("hostnames").Index(j), h, msg))
			}
		}
	}
	if s.ShareProcessNamespace != nil && *s.ShareProcessNamespace && s.HostPID {
		errs = append(errs, field.Invalid(sp.Child("shareProcessNamespace"), true, "ShareProcessNamespace and HostPID cannot both be enabled"))
	}
	// The node's namespaces are the node's: as a privileged container, a
	// pod gets them only where the node allows it (allowPrivileged).
	for _, host := range []struct {
		set  bool
		name string
	}{{s.HostNetwork, "hostNetwork"}, {s.HostPID, "hostPID"}, {s.HostIPC, "hostIPC"}} {
		if host.set && !opts.AllowPrivileged {
			errs = append(errs, field.Forbidden(sp.Child(host.name), "disallowed by node policy: the node's namespaces need allowPrivileged: true"))
		}
	}
	for i, r := range s.ImagePullSecrets {
		if r.Name == "" {
			errs = append(errs, field.Required(sp.Child("imagePullSecrets").Index(i).Child("name"), ""))
		}
	}
	errs = append(errs, metavalidation.ValidateLabels(s.NodeSelector, sp.Child("nodeSelector"))...)
	errs = append(errs, validateTolerations(s.Tolerations, sp.Child("tolerations"))...)
	return errs
}

// validateTolerations is ValidateTolerations of pkg/apis/core/validation.
// Tolerations are accepted and have no effect: a standalone node has no
// taints to tolerate.
func validateTolerations(tolerations []corev1.Toleration, tp *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, t := range tolerations {
		ip := tp.Index(i)
		if t.Key != "" {
			errs = append(errs, metavalidation.ValidateLabelName(t.Key, ip.Child("key"))...)
		}
		if t.Key == "" && t.Operator != corev1.TolerationOpExists {
			errs = append(errs, field.Invalid(ip.Child("operator"), t.Operator, "operator must be Exists when `key` is empty, which means \"match all values and all keys\""))
		}
		if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
			errs = append(errs, field.Invalid(ip.Child("effect"), t.Effect, "effect must be 'NoExecute' when `tolerationSeconds` is set"))
		}
		switch t.Operator {
		case corev1.TolerationOpEqual, "":
			for _, msg := range validation.IsValidLabelValue(t.Value) {
				errs = append(errs, field.Invalid(ip.Child("operator"), t.Value, msg))
			}
		case corev1.TolerationOpExists:
			if t.Value != "" {
				errs = append(errs, field.Invalid(ip.Child("operator"), t, "value must be empty when `operator` is 'Exists'"))
			}
		default:
			errs = append(errs, field.NotSupported(ip.Child("operator"), t.Operator, []corev1.TolerationOperator{corev1.TolerationOpEqual, corev1.TolerationOpExists}))
		}
		switch t.Effect {
		case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			errs = append(errs, field.NotSupported(ip.Child("effect"), t.Effect, []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute}))
		}
	}
	return errs
}

// ResolvePriority returns the pod's priority as the Priority admission
// plugin computes it (plugin/pkg/admission/priority): the value of
// spec.priorityClassName, looked up among the built-in classes and
// opts.PriorityClasses, or 0 without a class name. A class that does not
// exist is an error, and so is a spec.priority that differs from the class's
// value. The caller stores the result in spec.priority.
func ResolvePriority(pod *corev1.Pod, opts Options) (int32, *field.Error) {
	sp := field.NewPath("spec")
	name := pod.Spec.PriorityClassName
	var value int32
	if name != "" {
		v, ok := qos.BuiltinPriority(name)
		if !ok {
			v, ok = opts.PriorityClasses[name]
		}
		if !ok && opts.ClusterPriorityClasses && pod.Spec.Priority != nil {
			// A cluster's PriorityClass, resolved by its API server's
			// Priority admission into spec.priority.
			return *pod.Spec.Priority, nil
		}
		if !ok {
			return 0, field.NotFound(sp.Child("priorityClassName"), name)
		}
		value = v
	}
	if p := pod.Spec.Priority; p != nil && *p != value {
		return 0, field.Forbidden(sp.Child("priority"), fmt.Sprintf(
			"the integer value of priority (%d) must not be provided in pod spec; priority admission controller computed %d from the given PriorityClass name", *p, value))
	}
	return value, nil
}

func validateContainer(c *corev1.Container, names map[string]bool, volumes map[string]bool, opts Options, cp *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case c.Name == "":
		errs = append(errs, field.Required(cp.Child("name"), ""))
	case names[c.Name]:
		errs = append(errs, field.Duplicate(cp.Child("name"), c.Name))
	default:
		errs = append(errs, dns1123Label(c.Name, cp.Child("name"))...)
	}
	names[c.Name] = true
	switch {
	case c.Image == "":
		errs = append(errs, field.Required(cp.Child("image"), ""))
	case c.Image != strings.TrimSpace(c.Image):
		errs = append(errs, field.Invalid(cp.Child("image"), c.Image, "must not have leading or trailing whitespace"))
	}
	if c.ImagePullPolicy != "" && !slices.Contains(supportedPullPolicies, string(c.ImagePullPolicy)) {
		errs = append(errs, field.NotSupported(cp.Child("imagePullPolicy"), c.ImagePullPolicy, supportedPullPolicies))
	}
	if c.ImagePullPolicy == corev1.PullAlways && !opts.ImagePull && c.Image != "" {
		// The kubelet would pull at every start; a node that cannot pull
		// must not pretend to honour it with the image it happens to have.
		why := "Always"
		if imageTag(c.Image) == "latest" {
			why += " (the default for an untagged or :latest image)"
		}
		errs = append(errs, field.Forbidden(cp.Child("imagePullPolicy"),
			why+" pulls at every start, and this node does not pull images (imagePull: false in nodeguard's config): use IfNotPresent or Never, or set imagePull: true"))
	}
	if c.TerminationMessagePath != "" && c.TerminationMessagePath != DefaultTerminationMessagePath {
		errs = append(errs, field.Forbidden(cp.Child("terminationMessagePath"), NotSupported+": only "+DefaultTerminationMessagePath))
	}
	switch c.TerminationMessagePolicy {
	case "", corev1.TerminationMessageReadFile, corev1.TerminationMessageFallbackToLogsOnError:
	default:
		errs = append(errs, field.NotSupported(cp.Child("terminationMessagePolicy"), c.TerminationMessagePolicy,
			[]corev1.TerminationMessagePolicy{corev1.TerminationMessageReadFile, corev1.TerminationMessageFallbackToLogsOnError}))
	}
	errs = append(errs, validatePorts(c.Ports, cp.Child("ports"))...)
	errs = append(errs, validateEnvFrom(c.EnvFrom, cp.Child("envFrom"))...)
	errs = append(errs, validateEnv(c.Env, cp.Child("env"))...)
	errs = append(errs, validateResources(&c.Resources, cp.Child("resources"))...)
	privileged := c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged
	errs = append(errs, validateMounts(c.VolumeMounts, volumes, privileged, cp.Child("volumeMounts"))...)
	errs = append(errs, validateSecurityContext(c.SecurityContext, opts, cp.Child("securityContext"))...)
	errs = append(errs, validateProbes(c, cp)...)
	return errs
}

// validatePorts is validateContainerPorts of pkg/apis/core/validation, plus a
// check of hostIP, which Kubernetes leaves to the runtime.
func validatePorts(ports []corev1.ContainerPort, pp *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, port := range ports {
		ip := pp.Index(i)
		if port.Name != "" {
			if msgs := validation.IsValidPortName(port.Name); len(msgs) > 0 {
				for _, msg := range msgs {
					errs = append(errs, field.Invalid(ip.Child("name"), port.Name, msg))
				}
			} else if seen[port.Name] {
				errs = append(errs, field.Duplicate(ip.Child("name"), port.Name))
			} else {
				seen[port.Name] = true
			}
		}
		if port.ContainerPort == 0 {
			errs = append(errs, field.Required(ip.Child("containerPort"), ""))
		} else {
			for _, msg := range validation.IsValidPortNum(int(port.ContainerPort)) {
				errs = append(errs, field.Invalid(ip.Child("containerPort"), port.ContainerPort, msg))
			}
		}
		if port.HostPort != 0 {
			for _, msg := range validation.IsValidPortNum(int(port.HostPort)) {
				errs = append(errs, field.Invalid(ip.Child("hostPort"), port.HostPort, msg))
			}
		}
		if port.Protocol == "" {
			errs = append(errs, field.Required(ip.Child("protocol"), ""))
		} else if !slices.Contains(supportedProtocols, string(port.Protocol)) {
			errs = append(errs, field.NotSupported(ip.Child("protocol"), port.Protocol, supportedProtocols))
		}
		if port.HostIP != "" {
			if _, err := netip.ParseAddr(port.HostIP); err != nil {
				errs = append(errs, field.Invalid(ip.Child("hostIP"), port.HostIP, "must be a valid IP address"))
			}
		}
	}
	return errs
}

// uniqueHostPorts is AccumulateUniqueHostPorts of pkg/apis/core/validation:
// no two app container ports may use the same hostIP/protocol/hostPort.
func uniqueHostPorts(containers []corev1.Container, cp *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, c := range containers {
		for j, port := range c.Ports {
			if port.HostPort == 0 {
				continue
			}
			key := fmt.Sprintf("%s/%s/%d", port.HostIP, port.Protocol, port.HostPort)
			if seen[key] {
				errs = append(errs, field.Duplicate(cp.Index(i).Child("ports").Index(j).Child("hostPort"), key))
			}
			seen[key] = true
		}
	}
	return errs
}

// validateEnv is ValidateEnv of pkg/apis/core/validation with the relaxed
// name rule (RelaxedEnvironmentVariableValidation, on by default), reduced
// to the value sources nodeguard can fill in.
func validateEnv(env []corev1.EnvVar, ep *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, ev := range env {
		ip := ep.Index(i)
		if ev.Name == "" {
			errs = append(errs, field.Required(ip.Child("name"), ""))
		} else {
			for _, msg := range validation.IsRelaxedEnvVarName(ev.Name) {
				errs = append(errs, field.Invalid(ip.Child("name"), ev.Name, msg))
			}
		}
		vf := ev.ValueFrom
		if vf == nil {
			continue
		}
		vp := ip.Child("valueFrom")
		n := 0
		if vf.FieldRef != nil {
			n++
			errs = append(errs, validateFieldRef(vf.FieldRef, supportedEnvFieldPaths, vp.Child("fieldRef"))...)
		}
		if vf.ResourceFieldRef != nil {
			n++
			errs = append(errs, validateResourceFieldRef(vf.ResourceFieldRef, vp.Child("resourceFieldRef"))...)
		}
		if r := vf.ConfigMapKeyRef; r != nil {
			n++
			errs = append(errs, validateKeySelector(r.Name, r.Key, vp.Child("configMapKeyRef"))...)
		}
		if r := vf.SecretKeyRef; r != nil {
			n++
			errs = append(errs, validateKeySelector(r.Name, r.Key, vp.Child("secretKeyRef"))...)
		}
		switch {
		case n == 0:
			errs = append(errs, field.Invalid(vp, "", "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`"))
		case n > 1:
			errs = append(errs, field.Invalid(vp, "", "may not have more than one field specified at a time"))
		case ev.Value != "":
			errs = append(errs, field.Invalid(vp, "", "may not be specified when `value` is not empty"))
		}
	}
	return errs
}

// validateEnvFrom is validateEnvFrom of pkg/apis/core/validation: a prefix
// that is a valid variable name (relaxed), and exactly one of configMapRef
// and secretRef, naming an object by a DNS subdomain name.
func validateEnvFrom(envFrom []corev1.EnvFromSource, ep *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, ef := range envFrom {
		ip := ep.Index(i)
		if ef.Prefix != "" {
			for _, msg := range validation.IsRelaxedEnvVarName(ef.Prefix) {
				errs = append(errs, field.Invalid(ip.Child("prefix"), ef.Prefix, msg))
			}
		}
		n := 0
		if ef.ConfigMapRef != nil {
			n++
			errs = append(errs, validateObjectName(ef.ConfigMapRef.Name, ip.Child("configMapRef", "name"))...)
		}
		if ef.SecretRef != nil {
			n++
			errs = append(errs, validateObjectName(ef.SecretRef.Name, ip.Child("secretRef", "name"))...)
		}
		switch {
		case n == 0:
			errs = append(errs, field.Invalid(ip, "", "must specify one of: `configMapRef` or `secretRef`"))
		case n > 1:
			errs = append(errs, field.Invalid(ip, "", "may not have more than one field specified at a time"))
		}
	}
	return errs
}

// validateObjectName is ValidateConfigMapName and ValidateSecretName: a
// DNS subdomain, required.
func validateObjectName(name string, np *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(np, "")}
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(name) {
		errs = append(errs, field.Invalid(np, name, msg))
	}
	return errs
}

// validateKeySelector is validateConfigMapKeySelector and
// validateSecretKeySelector: a name and a key that is a valid ConfigMap key.
func validateKeySelector(name, key string, sp *field.Path) field.ErrorList {
	errs := validateObjectName(name, sp.Child("name"))
	if key == "" {
		return append(errs, field.Required(sp.Child("key"), ""))
	}
	for _, msg := range validation.IsConfigMapKey(key) {
		errs = append(errs, field.Invalid(sp.Child("key"), key, msg))
	}
	return errs
}

// validateResourceFieldRef is validateContainerResourceFieldSelector for
// env (containerName optional: the container itself) with
// validateContainerResourceDivisor.
func validateResourceFieldRef(fs *corev1.ResourceFieldSelector, fp *field.Path) field.ErrorList {
	if fs.Resource == "" {
		return field.ErrorList{field.Required(fp.Child("resource"), "")}
	}
	if !slices.Contains(supportedEnvResources, fs.Resource) {
		return field.ErrorList{field.NotSupported(fp.Child("resource"), fs.Resource, supportedEnvResources)}
	}
	if fs.Divisor.IsZero() {
		return nil
	}
	d := fs.Divisor.String()
	if strings.HasSuffix(fs.Resource, ".cpu") {
		if !slices.ContainsFunc(cpuDivisors, divisorIs(fs.Divisor)) {
			return field.ErrorList{field.Invalid(fp.Child("divisor"), d, "only divisor's values 1m and 1 are supported with the cpu resource")}
		}
		return nil
	}
	if !slices.ContainsFunc(memoryDivisors, divisorIs(fs.Divisor)) {
		what := "memory"
		if strings.HasSuffix(fs.Resource, ".ephemeral-storage") {
			what = "local ephemeral storage"
		}
		return field.ErrorList{field.Invalid(fp.Child("divisor"), d,
			"only divisor's values 1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei are supported with the "+what+" resource")}
	}
	return nil
}

func divisorIs(d resource.Quantity) func(string) bool {
	return func(v string) bool {
		q := resource.MustParse(v)
		return q.Cmp(d) == 0
	}
}

// validateFieldRef is validateObjectFieldSelector: apiVersion v1 and one of
// the supported paths, or a label or annotation by key
// (metadata.labels['<key>']), whose key must be a qualified name (an
// annotation's in lower case, as the API server checks it).
func validateFieldRef(fs *corev1.ObjectFieldSelector, supported []string, fp *field.Path) field.ErrorList {
	switch {
	case fs.APIVersion == "":
		return field.ErrorList{field.Required(fp.Child("apiVersion"), "")}
	case fs.APIVersion != "v1":
		return field.ErrorList{field.NotSupported(fp.Child("apiVersion"), fs.APIVersion, []string{"v1"})}
	case fs.FieldPath == "":
		return field.ErrorList{field.Required(fp.Child("fieldPath"), "")}
	}
	path, key, subscripted := splitSubscript(fs.FieldPath)
	if !subscripted {
		if !slices.Contains(supported, fs.FieldPath) {
			return field.ErrorList{field.NotSupported(fp.Child("fieldPath"), fs.FieldPath, supportedWithSubscripts(supported))}
		}
		return nil
	}
	if !slices.Contains(subscriptedFieldPaths, path) {
		return field.ErrorList{field.Invalid(fp.Child("fieldPath"), fs.FieldPath, "does not support subscript")}
	}
	if path == "metadata.annotations" {
		key = strings.ToLower(key)
	}
	var errs field.ErrorList
	for _, msg := range validation.IsQualifiedName(key) {
		errs = append(errs, field.Invalid(fp.Child("fieldPath"), fs.FieldPath, msg))
	}
	return errs
}

// splitSubscript splits "metadata.labels['k']" into "metadata.labels" and
// "k", as the API server's fieldpath.SplitMaybeSubscriptedPath does.
func splitSubscript(fieldPath string) (path, key string, ok bool) {
	if !strings.HasSuffix(fieldPath, "']") {
		return fieldPath, "", false
	}
	s := strings.TrimSuffix(fieldPath, "']")
	i := strings.Index(s, "['")
	if i < 0 {
		return fieldPath, "", false
	}
	return s[:i], s[i+2:], true
}

// supportedWithSubscripts lists the supported paths and the subscripted
// forms, for an error message.
func supportedWithSubscripts(supported []string) []string {
	out := slices.Clone(supported)
	for _, p := range subscriptedFieldPaths {
		out = append(out, p+"['<key>']")
	}
	slices.Sort(out)
	return out
}

// validateResources is ValidateContainerResourceRequirements reduced to the
// resources nodeguard manages: cpu, memory and ephemeral-storage.
func validateResources(r *corev1.ResourceRequirements, rp *field.Path) field.ErrorList {
	var errs field.ErrorList
	check := func(list corev1.ResourceList, lp *field.Path) {
		for _, name := range sortedNames(list) {
			q := list[name]
			np := lp.Key(string(name))
			if !slices.Contains(supportedResources, string(name)) {
				errs = append(errs, field.NotSupported(np, name, supportedResources))
				continue
			}
			if q.Cmp(resource.Quantity{}) < 0 {
				errs = append(errs, field.Invalid(np, q.String(), isNegativeErrorMsg))
			}
		}
	}
	check(r.Limits, rp.Child("limits"))
	check(r.Requests, rp.Child("requests"))
	for _, name := range sortedNames(r.Requests) {
		req := r.Requests[name]
		if lim, ok := r.Limits[name]; ok && req.Cmp(lim) > 0 {
			errs = append(errs, field.Invalid(rp.Child("requests"), req.String(),
				fmt.Sprintf("must be less than or equal to %s limit of %s", name, lim.String())))
		}
	}
	return errs
}

func sortedNames(l corev1.ResourceList) []corev1.ResourceName {
	names := make([]corev1.ResourceName, 0, len(l))
	for n := range l {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// validateMounts is ValidateVolumeMounts of pkg/apis/core/validation, with
// absolute mount paths required (Linux only) and the indexed subPath path.
// Mount propagation is validateMountPropagation: Bidirectional only in a
// privileged container, which may change the host's mounts through it.
func validateMounts(mounts []corev1.VolumeMount, volumes map[string]bool, privileged bool, mp *field.Path) field.ErrorList {
	var errs field.ErrorList
	paths := map[string]bool{}
	for i, m := range mounts {
		ip := mp.Index(i)
		if m.Name == "" {
			errs = append(errs, field.Required(ip.Child("name"), ""))
		} else if !volumes[m.Name] {
			errs = append(errs, field.NotFound(ip.Child("name"), m.Name))
		}
		switch {
		case m.MountPath == "":
			errs = append(errs, field.Required(ip.Child("mountPath"), ""))
		case paths[m.MountPath]:
			errs = append(errs, field.Invalid(ip.Child("mountPath"), m.MountPath, "must be unique"))
		case !path.IsAbs(m.MountPath):
			errs = append(errs, field.Invalid(ip.Child("mountPath"), m.MountPath, "must be an absolute path"))
		}
		paths[m.MountPath] = true
		if m.SubPath != "" {
			errs = append(errs, localDescendingPath(m.SubPath, ip.Child("subPath"))...)
		}
		if m.MountPropagation != nil {
			switch mode := *m.MountPropagation; mode {
			case corev1.MountPropagationNone, corev1.MountPropagationHostToContainer:
			case corev1.MountPropagationBidirectional:
				if !privileged {
					errs = append(errs, field.Forbidden(ip.Child("mountPropagation"), "Bidirectional mount propagation is available only to privileged containers"))
				}
			default:
				errs = append(errs, field.NotSupported(ip.Child("mountPropagation"), mode, supportedPropagations))
			}
		}
		if m.RecursiveReadOnly != nil && *m.RecursiveReadOnly != corev1.RecursiveReadOnlyDisabled {
			errs = append(errs, field.Forbidden(ip.Child("recursiveReadOnly"), NotSupported+": only Disabled"))
		}
	}
	return errs
}

// validateDevices checks a container's volumeDevices as the API server's
// ValidateVolumeDevices: an existing volume that is a
// persistentVolumeClaim, used once and not also in volumeMounts, at a
// unique absolute devicePath that no volumeMount uses. Whether the claim's
// volume has volumeMode Block is known only once it is bound (Devices).
func validateDevices(c *corev1.Container, volumes, claims map[string]bool, cp *field.Path) field.ErrorList {
	var errs field.ErrorList
	mounted := map[string]bool{}
	mountPaths := map[string]bool{}
	for _, vm := range c.VolumeMounts {
		mounted[vm.Name] = true
		mountPaths[path.Clean(vm.MountPath)] = true
	}
	names, paths := map[string]bool{}, map[string]bool{}
	for i, vd := range c.VolumeDevices {
		ip := cp.Child("volumeDevices").Index(i)
		np := ip.Child("name")
		switch {
		case vd.Name == "":
			errs = append(errs, field.Required(np, ""))
		case !volumes[vd.Name]:
			errs = append(errs, field.NotFound(np, vd.Name))
		case !claims[vd.Name]:
			errs = append(errs, field.Invalid(np, vd.Name, "can only use volume source type of PersistentVolumeClaim for block mode"))
		case names[vd.Name]:
			errs = append(errs, field.Invalid(np, vd.Name, "must be unique"))
		case mounted[vd.Name]:
			errs = append(errs, field.Invalid(np, vd.Name, "can not be used in both volumeMounts and volumeDevices"))
		}
		names[vd.Name] = true
		dp := ip.Child("devicePath")
		switch p := path.Clean(vd.DevicePath); {
		case vd.DevicePath == "":
			errs = append(errs, field.Required(dp, ""))
		case !path.IsAbs(vd.DevicePath):
			errs = append(errs, field.Invalid(dp, vd.DevicePath, "must be an absolute path"))
		case slices.Contains(strings.Split(vd.DevicePath, "/"), ".."):
			errs = append(errs, field.Invalid(dp, vd.DevicePath, "can not contain '..'"))
		case paths[p]:
			errs = append(errs, field.Invalid(dp, vd.DevicePath, "must be unique"))
		case mountPaths[p]:
			errs = append(errs, field.Invalid(dp, vd.DevicePath, "must not be used as a mountPath as well"))
		default:
			paths[p] = true
		}
	}
	return errs
}

// localDescendingPath is validateLocalDescendingPath: relative, no "..".
func localDescendingPath(p string, fp *field.Path) field.ErrorList {
	var errs field.ErrorList
	if path.IsAbs(p) {
		errs = append(errs, field.Invalid(fp, p, "must be a relative path"))
	}
	if slices.Contains(strings.Split(p, "/"), "..") {
		errs = append(errs, field.Invalid(fp, p, "must not contain '..'"))
	}
	return errs
}

func validateSecurityContext(sc *corev1.SecurityContext, opts Options, sp *field.Path) field.ErrorList {
	if sc == nil {
		return nil
	}
	var errs field.ErrorList
	if sc.Privileged != nil && *sc.Privileged && !opts.AllowPrivileged {
		errs = append(errs, field.Forbidden(sp.Child("privileged"), "disallowed by node policy"))
	}
	errs = append(errs, validateIDs(sc.RunAsUser, sc.RunAsGroup, sp)...)
	if sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount {
		// The API server allows Unmasked only with hostUsers false, which
		// nodeguard refuses.
		errs = append(errs, field.Forbidden(sp.Child("procMount"), NotSupported+": only Default (Unmasked needs hostUsers: false)"))
	}
	errs = append(errs, validateSeccomp(sc.SeccompProfile, sp.Child("seccompProfile"))...)
	errs = append(errs, validateAppArmor(sc.AppArmorProfile, opts, sp.Child("appArmorProfile"))...)
	if c := sc.Capabilities; c != nil {
		for _, l := range []struct {
			caps []corev1.Capability
			name string
		}{{c.Add, "add"}, {c.Drop, "drop"}} {
			for i, capability := range l.caps {
				if !isCapability(capability) {
					errs = append(errs, field.Invalid(sp.Child("capabilities", l.name).Index(i), capability, "not a Linux capability"))
				}
			}
		}
	}
	// validateSecurityContext in pkg/apis/core/validation.
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		if sc.Privileged != nil && *sc.Privileged {
			errs = append(errs, field.Invalid(sp, sc, "cannot set `allowPrivilegeEscalation` to false and `privileged` to true"))
		}
		if sc.Capabilities != nil && slices.Contains(sc.Capabilities.Add, "CAP_SYS_ADMIN") {
			// The API server compares the exact string; so do we, so that
			// nothing it accepts is refused here.
			errs = append(errs, field.Invalid(sp, sc, "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN"))
		}
	}
	return errs
}

func validateIDs(user, group *int64, sp *field.Path) field.ErrorList {
	var errs field.ErrorList
	if user != nil {
		for _, msg := range validation.IsValidUserID(*user) {
			errs = append(errs, field.Invalid(sp.Child("runAsUser"), *user, msg))
		}
	}
	if group != nil {
		for _, msg := range validation.IsValidGroupID(*group) {
			errs = append(errs, field.Invalid(sp.Child("runAsGroup"), *group, msg))
		}
	}
	return errs
}

// validateDNS is validateDNSPolicy and validatePodDNSConfig.
func validateDNS(s *corev1.PodSpec, sp *field.Path) field.ErrorList {
	var errs field.ErrorList
	dp := sp.Child("dnsPolicy")
	switch s.DNSPolicy {
	case corev1.DNSClusterFirstWithHostNet, corev1.DNSClusterFirst, corev1.DNSDefault, corev1.DNSNone:
	case "":
		errs = append(errs, field.Required(dp, ""))
	default:
		errs = append(errs, field.NotSupported(dp, s.DNSPolicy, supportedDNSPolicies))
	}
	cp := sp.Child("dnsConfig")
	c := s.DNSConfig
	if s.DNSPolicy == corev1.DNSNone {
		if c == nil {
			return append(errs, field.Required(cp, "must provide `dnsConfig` when `dnsPolicy` is None"))
		}
		if len(c.Nameservers) == 0 {
			return append(errs, field.Required(cp.Child("nameservers"), "must provide at least one DNS nameserver when `dnsPolicy` is None"))
		}
	}
	if c == nil {
		return errs
	}
	if len(c.Nameservers) > maxDNSNameservers {
		errs = append(errs, field.Invalid(cp.Child("nameservers"), c.Nameservers, fmt.Sprintf("must not have more than %v nameservers", maxDNSNameservers)))
	}
	for i, ns := range c.Nameservers {
		errs = append(errs, validation.IsValidIP(cp.Child("nameservers").Index(i), ns)...)
	}
	if len(c.Searches) > maxDNSSearchPaths {
		errs = append(errs, field.Invalid(cp.Child("searches"), c.Searches, fmt.Sprintf("must not have more than %v search paths", maxDNSSearchPaths)))
	}
	if len(strings.Join(c.Searches, " ")) > maxDNSSearchListChars {
		errs = append(errs, field.Invalid(cp.Child("searches"), c.Searches, fmt.Sprintf("must not have more than %v characters (including spaces) in the search list", maxDNSSearchListChars)))
	}
	for i, search := range c.Searches {
		if search == "." {
			continue // the root domain, allowed since Kubernetes 1.32
		}
		search = strings.TrimSuffix(search, ".")
		for _, msg := range validation.IsDNS1123Subdomain(search) {
			errs = append(errs, field.Invalid(cp.Child("searches").Index(i), search, msg))
		}
	}
	for i, o := range c.Options {
		if o.Name == "" {
			errs = append(errs, field.Required(cp.Child("options").Index(i), "must not be empty"))
		}
	}
	return errs
}

// validateVolumes is validateVolumes of pkg/apis/core/validation for the
// volume types nodeguard supports; it returns the set of valid names.
func validateVolumes(volumes []corev1.Volume, vp *field.Path) (map[string]bool, field.ErrorList) {
	var errs field.ErrorList
	names := map[string]bool{}
	for i := range volumes {
		v := &volumes[i]
		ip := vp.Index(i)
		np := ip.Child("name")
		nameErrs := dns1123Label(v.Name, np)
		switch {
		case v.Name == "":
			errs = append(errs, field.Required(np, ""))
		case len(nameErrs) > 0:
			errs = append(errs, nameErrs...)
		case names[v.Name]:
			errs = append(errs, field.Duplicate(np, v.Name))
		default:
			names[v.Name] = true
		}
		errs = append(errs, validateVolumeSource(&v.VolumeSource, ip)...)
	}
	return names, errs
}

func validateVolumeSource(s *corev1.VolumeSource, ip *field.Path) field.ErrorList {
	var errs field.ErrorList
	n := 0
	if e := s.EmptyDir; e != nil {
		n++
		ep := ip.Child("emptyDir")
		if !slices.Contains(supportedMedia, string(e.Medium)) {
			errs = append(errs, field.NotSupported(ep.Child("medium"), e.Medium, supportedMedia))
		}
		if e.SizeLimit != nil && e.SizeLimit.Sign() < 0 {
			errs = append(errs, field.Forbidden(ep.Child("sizeLimit"), "SizeLimit field must be a valid resource quantity"))
		}
	}
	if h := s.HostPath; h != nil {
		if n++; n == 1 {
			hp := ip.Child("hostPath")
			switch {
			case h.Path == "":
				errs = append(errs, field.Required(hp.Child("path"), ""))
			case !path.IsAbs(h.Path):
				errs = append(errs, field.Invalid(hp.Child("path"), h.Path, "must be an absolute path"))
			case slices.Contains(strings.Split(h.Path, "/"), ".."):
				errs = append(errs, field.Invalid(hp.Child("path"), h.Path, "must not contain '..'"))
			}
			if h.Type != nil && !slices.Contains(supportedHostPathTypes, string(*h.Type)) {
				errs = append(errs, field.NotSupported(hp.Child("type"), *h.Type, supportedHostPathTypes))
			}
		}
	}
	if c := s.PersistentVolumeClaim; c != nil {
		if n++; n == 1 {
			errs = append(errs, objectName(c.ClaimName, ip.Child("persistentVolumeClaim", "claimName"))...)
		}
	}
	if c := s.ConfigMap; c != nil {
		if n++; n == 1 {
			cp := ip.Child("configMap")
			errs = append(errs, objectName(c.Name, cp.Child("name"))...)
			errs = append(errs, validateMode(c.DefaultMode, cp.Child("defaultMode"))...)
			errs = append(errs, validateItems(c.Items, cp.Child("items"))...)
		}
	}
	if c := s.Secret; c != nil {
		if n++; n == 1 {
			cp := ip.Child("secret")
			errs = append(errs, objectName(c.SecretName, cp.Child("secretName"))...)
			errs = append(errs, validateMode(c.DefaultMode, cp.Child("defaultMode"))...)
			errs = append(errs, validateItems(c.Items, cp.Child("items"))...)
		}
	}
	if nfs := s.NFS; nfs != nil {
		if n++; n == 1 {
			errs = append(errs, validateNFS(nfs, ip.Child("nfs"))...)
		}
	}
	if d := s.DownwardAPI; d != nil {
		if n++; n == 1 {
			dp := ip.Child("downwardAPI")
			errs = append(errs, validateMode(d.DefaultMode, dp.Child("defaultMode"))...)
			errs = append(errs, validateDownwardItems(d.Items, dp.Child("items"))...)
		}
	}
	if p := s.Projected; p != nil {
		if n++; n == 1 {
			errs = append(errs, validateProjected(p, ip.Child("projected"))...)
		}
	}
	if im := s.Image; im != nil {
		if n++; n == 1 {
			errs = append(errs, validateImageSource(im, ip.Child("image"))...)
		}
	}
	switch {
	case n == 0 && !otherVolumeSource(s):
		errs = append(errs, field.Required(ip, "must specify a volume type"))
	case n > 1:
		errs = append(errs, field.Forbidden(ip, "may not specify more than 1 volume type"))
	}
	return errs
}

// validateImageSource checks an image volume as the API server checks one
// of a pod: a reference (optional in the API for workload templates, not
// for a pod) without surrounding whitespace, and a known pullPolicy.
func validateImageSource(s *corev1.ImageVolumeSource, ip *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch rp := ip.Child("reference"); {
	case s.Reference == "":
		errs = append(errs, field.Required(rp, ""))
	case s.Reference != strings.TrimSpace(s.Reference):
		errs = append(errs, field.Invalid(rp, s.Reference, "must not have leading or trailing whitespace"))
	}
	if !slices.Contains(supportedPullPolicies, string(s.PullPolicy)) {
		errs = append(errs, field.NotSupported(ip.Child("pullPolicy"), s.PullPolicy, supportedPullPolicies))
	}
	return errs
}

// imageVolumesNeed says what a runtime needs to mount image volumes, and
// what it does without: the refusals' reason.
const (
	imageVolumesNeed       = "image volumes need a runtime that mounts CRI Mount.image (containerd 2.1 or later); one that does not ignores the field and the container would see an empty directory"
	imageVolumeSubPathNeed = "a subPath of an image volume needs a runtime that mounts CRI Mount.image_sub_path (containerd 2.2 or later)"
)

// validateImageVolumes checks a pod's image volumes against the node:
// the runtime must mount them (Options.ImageVolumes) and, for a subPath,
// a directory of them (Options.ImageVolumeSubPath); pullPolicy Always
// needs a node that pulls, as a container's does. The kubelet mounts an
// image volume read-only whatever the volumeMount says, and so does
// nodeguard: readOnly false is accepted.
func validateImageVolumes(s *corev1.PodSpec, opts Options, sp *field.Path) field.ErrorList {
	var errs field.ErrorList
	runtime := opts.Runtime
	if runtime == "" {
		runtime = "unknown"
	}
	images := map[string]bool{}
	for i, v := range s.Volumes {
		if v.Image == nil {
			continue
		}
		images[v.Name] = true
		ip := sp.Child("volumes").Index(i).Child("image")
		if !opts.ImageVolumes {
			errs = append(errs, field.Forbidden(ip, fmt.Sprintf("%s: the runtime (%s) cannot mount image volumes: %s", NotSupported, runtime, imageVolumesNeed)))
		}
		if v.Image.PullPolicy == corev1.PullAlways && !opts.ImagePull {
			errs = append(errs, field.Forbidden(ip.Child("pullPolicy"),
				"Always pulls at every start, and this node does not pull images (imagePull: false in nodeguard's config): use IfNotPresent or Never, or set imagePull: true"))
		}
	}
	if len(images) == 0 || !opts.ImageVolumes || opts.ImageVolumeSubPath {
		return errs
	}
	check := func(cs []corev1.Container, cp *field.Path) {
		for i := range cs {
			for j, m := range cs[i].VolumeMounts {
				if images[m.Name] && m.SubPath != "" {
					errs = append(errs, field.Forbidden(cp.Index(i).Child("volumeMounts").Index(j).Child("subPath"),
						fmt.Sprintf("%s: the runtime (%s) cannot mount a subPath of an image volume: %s", NotSupported, runtime, imageVolumeSubPathNeed)))
				}
			}
		}
	}
	check(s.InitContainers, sp.Child("initContainers"))
	check(s.Containers, sp.Child("containers"))
	return errs
}

// validateNFS checks an nfs volume as the API server does: a server and an
// absolute export path (the volume code checks the server's form).
func validateNFS(s *corev1.NFSVolumeSource, np *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.Server == "" {
		errs = append(errs, field.Required(np.Child("server"), ""))
	}
	switch pp := np.Child("path"); {
	case s.Path == "":
		errs = append(errs, field.Required(pp, ""))
	case !path.IsAbs(s.Path):
		errs = append(errs, field.Invalid(pp, s.Path, "must be an absolute path"))
	}
	return errs
}

// otherVolumeSource reports whether a volume type nodeguard refuses is set
// (checkSupport reports it), so that "must specify a volume type" is not
// reported as well.
func otherVolumeSource(s *corev1.VolumeSource) bool {
	return *s != (corev1.VolumeSource{})
}

func validateProjected(p *corev1.ProjectedVolumeSource, pp *field.Path) field.ErrorList {
	errs := validateMode(p.DefaultMode, pp.Child("defaultMode"))
	for i, src := range p.Sources {
		sp := pp.Child("sources").Index(i)
		n := 0
		if c := src.ConfigMap; c != nil {
			n++
			errs = append(errs, objectName(c.Name, sp.Child("configMap", "name"))...)
			errs = append(errs, validateItems(c.Items, sp.Child("configMap", "items"))...)
		}
		if c := src.Secret; c != nil {
			n++
			errs = append(errs, objectName(c.Name, sp.Child("secret", "name"))...)
			errs = append(errs, validateItems(c.Items, sp.Child("secret", "items"))...)
		}
		if d := src.DownwardAPI; d != nil {
			n++
			errs = append(errs, validateDownwardItems(d.Items, sp.Child("downwardAPI", "items"))...)
		}
		if n > 1 {
			errs = append(errs, field.Forbidden(sp, "may not specify more than 1 volume type per source"))
		}
	}
	return errs
}

func validateItems(items []corev1.KeyToPath, ip *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, it := range items {
		p := ip.Index(i)
		if it.Key == "" {
			errs = append(errs, field.Required(p.Child("key"), ""))
		}
		errs = append(errs, localNonReservedPath(it.Path, p.Child("path"))...)
		errs = append(errs, validateMode(it.Mode, p.Child("mode"))...)
	}
	return errs
}

func validateDownwardItems(items []corev1.DownwardAPIVolumeFile, ip *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, it := range items {
		p := ip.Index(i)
		errs = append(errs, localNonReservedPath(it.Path, p.Child("path"))...)
		errs = append(errs, validateMode(it.Mode, p.Child("mode"))...)
		switch {
		case it.FieldRef != nil && it.ResourceFieldRef != nil:
			errs = append(errs, field.Invalid(p, "resource", "fieldRef and resourceFieldRef can not be specified simultaneously"))
		case it.ResourceFieldRef != nil:
			// A volume's reference names its container (env's is the
			// container's own).
			rp := p.Child("resourceFieldRef")
			if it.ResourceFieldRef.ContainerName == "" {
				errs = append(errs, field.Required(rp.Child("containerName"), ""))
			}
			errs = append(errs, validateResourceFieldRef(it.ResourceFieldRef, rp)...)
		case it.FieldRef == nil:
			errs = append(errs, field.Required(p, "one of `fieldRef` and `resourceFieldRef` is required"))
		default:
			errs = append(errs, validateFieldRef(it.FieldRef, supportedVolumeFieldPaths, p.Child("fieldRef"))...)
		}
	}
	return errs
}

// localNonReservedPath is validateLocalNonReservedPath: a relative path
// without ".." that does not start with "..".
func localNonReservedPath(p string, fp *field.Path) field.ErrorList {
	if p == "" {
		return field.ErrorList{field.Required(fp, "")}
	}
	errs := localDescendingPath(p, fp)
	if strings.HasPrefix(p, "..") && !slices.Contains(strings.Split(p, "/"), "..") {
		errs = append(errs, field.Invalid(fp, p, "must not start with '..'"))
	}
	return errs
}

func validateMode(mode *int32, mp *field.Path) field.ErrorList {
	if mode != nil && (*mode > fileModeMax || *mode < 0) {
		return field.ErrorList{field.Invalid(mp, *mode, fileModeErrorMsg)}
	}
	return nil
}

// objectName checks a ConfigMap or Secret name: required, a DNS subdomain.
func objectName(name string, np *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(np, "")}
	}
	var errs field.ErrorList
	for _, msg := range apivalidation.NameIsDNSSubdomain(name, false) {
		errs = append(errs, field.Invalid(np, name, msg))
	}
	return errs
}

func dns1123Label(v string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Label(v) {
		errs = append(errs, field.Invalid(p, v, msg))
	}
	return errs
}

// isSidecar: an init container with restartPolicy Always, a sidecar
// (KEP-753) that keeps running next to the app containers.
func isSidecar(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// validateRestartPolicy checks a container's own restartPolicy as the API
// server does with the ContainerRestartRules gate off: an init container
// may set it only to Always (making it a sidecar), an app container not at
// all; restartPolicyRules is refused by the field table.
func validateRestartPolicy(c *corev1.Container, init bool, cp *field.Path) field.ErrorList {
	if c.RestartPolicy == nil {
		return nil
	}
	fp := cp.Child("restartPolicy")
	if !init {
		return field.ErrorList{field.Forbidden(fp, "may not be set for non-init containers: nodeguard honours a container's own restartPolicy only on init containers (sidecars), not the per-container restart rules of ContainerRestartRules")}
	}
	if *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		return field.ErrorList{field.NotSupported(fp, *c.RestartPolicy, []corev1.ContainerRestartPolicy{corev1.ContainerRestartPolicyAlways})}
	}
	return nil
}
