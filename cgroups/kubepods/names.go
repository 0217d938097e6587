package kubepods

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Driver is a cgroup driver: how cgroups are named and who creates them.
type Driver string

// The drivers the kubelet (and runc) know.
const (
	// Cgroupfs names cgroups by their directory paths.
	Cgroupfs Driver = "cgroupfs"
	// Systemd names cgroups as nested systemd slices.
	Systemd Driver = "systemd"
)

// The fixed components of the hierarchy (pkg/kubelet/cm).
const (
	// KubepodsName is the node-allocatable cgroup every pod lives under
	// (defaultNodeAllocatableCgroupName).
	KubepodsName = "kubepods"
	// BurstableName is the Burstable QoS cgroup below kubepods.
	BurstableName = "burstable"
	// BestEffortName is the BestEffort QoS cgroup below kubepods.
	BestEffortName = "besteffort"
	// PodPrefix starts every pod cgroup's last component (podCgroupNamePrefix).
	PodPrefix = "pod"

	systemdSuffix = ".slice"
	// maxComponentLen keeps a component within NAME_MAX (255) after the
	// systemd driver prefixes it with its ancestors' names.
	maxComponentLen = 128
)

var (
	// ErrUnknownDriver is wrapped by errors about a driver other than
	// Cgroupfs and Systemd.
	ErrUnknownDriver = errors.New("unknown cgroup driver")
	// ErrUnknownClass is wrapped by errors about a QoS class that is not
	// Guaranteed, Burstable or BestEffort.
	ErrUnknownClass = errors.New("unknown QoS class")
	// ErrBadComponent is wrapped by errors about a root or UID that cannot be
	// part of a cgroup name.
	ErrBadComponent = errors.New("invalid cgroup name component")
)

// ParseDriver returns the driver named s.
func ParseDriver(s string) (Driver, error) {
	switch d := Driver(s); d {
	case Cgroupfs, Systemd:
		return d, nil
	}
	return "", fmt.Errorf("parse cgroup driver %q: %w (supported: %q, %q)", s, ErrUnknownDriver, Cgroupfs, Systemd)
}

// DriverFor is the driver an agent uses: the configured one when set,
// else the runtime's as it reports it (CRI RuntimeConfig; "" when it does
// not), else Cgroupfs, the kubelet's default. The kubelet takes the
// runtime's too (KubeletCgroupDriverFromCRI); nodeguard refuses to start
// on a runtime whose driver is not the configured one (CheckRuntimeDriver).
func DriverFor(configured, runtime string) (Driver, error) {
	switch {
	case configured != "":
		return ParseDriver(configured)
	case runtime != "":
		return ParseDriver(runtime)
	}
	return Cgroupfs, nil
}

// Name returns the name of the node-allocatable cgroup that holds every
// pod: <root>/kubepods or /kubepods.slice (NodeAllocatableRoot).
func Name(d Driver, root string) (string, error) {
	parts, err := rootComponents(d, root)
	if err != nil {
		return "", err
	}
	return render(d, root, append(parts, KubepodsName))
}

// QOSParent returns the name of the cgroup that holds the pods of a QoS
// class: kubepods itself for Guaranteed, kubepods/burstable and
// kubepods/besteffort for the others.
func QOSParent(d Driver, root string, class corev1.PodQOSClass) (string, error) {
	parts, err := qosComponents(d, root, class)
	if err != nil {
		return "", err
	}
	return render(d, root, parts)
}

// PodParent returns the name of a pod's cgroup, the parent of its
// containers' cgroups (GetPodContainerName): "pod"+uid below its class's
// QOSParent.
func PodParent(d Driver, root string, class corev1.PodQOSClass, uid types.UID) (string, error) {
	parts, err := qosComponents(d, root, class)
	if err != nil {
		return "", err
	}
	if err := checkUID(uid); err != nil {
		return "", err
	}
	return render(d, root, append(parts, PodPrefix+string(uid)))
}

func qosComponents(d Driver, root string, class corev1.PodQOSClass) ([]string, error) {
	parts, err := rootComponents(d, root)
	if err != nil {
		return nil, err
	}
	parts = append(parts, KubepodsName)
	switch class {
	case corev1.PodQOSGuaranteed:
		return parts, nil
	case corev1.PodQOSBurstable:
		return append(parts, BurstableName), nil
	case corev1.PodQOSBestEffort:
		return append(parts, BestEffortName), nil
	}
	return nil, fmt.Errorf("name QoS cgroup for class %q: %w", class, ErrUnknownClass)
}

// rootComponents splits a cgroupfs-form root into components
// (ParseCgroupfsToCgroupName) and checks each as NewCgroupName would.
func rootComponents(d Driver, root string) ([]string, error) {
	switch d {
	case Cgroupfs, Systemd:
	default:
		return nil, fmt.Errorf("name cgroup with driver %q: %w", d, ErrUnknownDriver)
	}
	if root == "" {
		return nil, fmt.Errorf("name cgroup under an empty root (use \"/\" for the hierarchy root): %w", ErrBadComponent)
	}
	if d == Systemd && !strings.HasPrefix(root, "/") {
		return nil, fmt.Errorf("name cgroup under relative root %q: the systemd driver needs an absolute root: %w", root, ErrBadComponent)
	}
	trimmed := strings.TrimSuffix(strings.TrimPrefix(root, "/"), "/")
	if trimmed == "" {
		return nil, nil
	}
	parts := strings.Split(trimmed, "/")
	for _, p := range parts {
		if err := checkComponent(p); err != nil {
			return nil, fmt.Errorf("name cgroup under root %q: %w", root, err)
		}
		if d == Systemd {
			if err := checkUnitChars(p); err != nil {
				return nil, fmt.Errorf("name cgroup under root %q: %w", root, err)
			}
		}
	}
	if d == Systemd {
		// The longest unit the root leads is a pod slice: every root
		// component, kubepods, the QoS class and pod<uid> (a UID is a
		// 36-byte UUID), dash-joined.
		n := len("kubepods-besteffort-pod") + 36 + len(systemdSuffix)
		for _, p := range parts {
			n += len(p) + 1
		}
		if n > maxUnitName {
			return nil, fmt.Errorf("name cgroup under root %q: %w: its pod slices' names would pass systemd's %d bytes", root, ErrBadComponent, maxUnitName)
		}
	}
	return parts, nil
}

// maxUnitName is systemd's UNIT_NAME_MAX: a unit name, suffix included, has
// at most 255 bytes.
const maxUnitName = 255

// checkUnitChars refuses, for the systemd driver, a root component with a
// byte systemd does not allow in a unit name (unit_name_is_valid: ASCII
// letters and digits, ':', '-', '_', '.', '\\'; '-' becomes '_' here).
func checkUnitChars(p string) error {
	for _, r := range p {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == ':' || r == '-' || r == '.') {
			return fmt.Errorf("%w: %q has %q, which a systemd unit name cannot hold", ErrBadComponent, p, r)
		}
	}
	return nil
}

// checkComponent refuses what NewCgroupName refuses ('/' and '_'), what would
// escape or break a path (empty, "." and ".."), and control characters. A
// '-' is allowed: the systemd driver escapes it to '_'.
func checkComponent(p string) error {
	switch {
	case p == "" || p == "." || p == "..":
		return fmt.Errorf("%w: %q", ErrBadComponent, p)
	case len(p) > maxComponentLen:
		return fmt.Errorf("%w: %q is longer than %d bytes", ErrBadComponent, p, maxComponentLen)
	case strings.ContainsAny(p, "/_"):
		return fmt.Errorf("%w: %q contains '/' or '_'", ErrBadComponent, p)
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: %q contains a control character", ErrBadComponent, p)
		}
	}
	return nil
}

// checkUID accepts the UIDs Kubernetes and the kubelet generate: UUIDs and
// hex digests, i.e. ASCII letters, digits and '-'.
func checkUID(uid types.UID) error {
	if uid == "" || len(uid) > maxComponentLen {
		return fmt.Errorf("name pod cgroup: %w: pod UID %q must have 1 to %d characters", ErrBadComponent, uid, maxComponentLen)
	}
	for _, r := range uid {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-') {
			return fmt.Errorf("name pod cgroup: %w: pod UID %q may contain only letters, digits and '-'", ErrBadComponent, uid)
		}
	}
	return nil
}

// render turns components into the driver's name: ToCgroupfs or ToSystemd of
// cgroup_manager_linux.go.
func render(d Driver, root string, parts []string) (string, error) {
	if d == Cgroupfs {
		name := strings.Join(parts, "/")
		if strings.HasPrefix(root, "/") {
			name = "/" + name
		}
		return name, nil
	}
	escaped := make([]string, len(parts))
	for i, p := range parts {
		escaped[i] = strings.ReplaceAll(p, "-", "_")
	}
	unit := strings.Join(escaped, "-") + systemdSuffix
	if len(unit) > maxUnitName {
		return "", fmt.Errorf("name systemd slice %q: %w: longer than systemd's %d bytes", unit, ErrBadComponent, maxUnitName)
	}
	return expandSlice(unit)
}

// expandSlice is runc's systemd ExpandSlice: "a-b-c.slice" becomes
// "/a.slice/a-b.slice/a-b-c.slice".
func expandSlice(slice string) (string, error) {
	name, ok := strings.CutSuffix(slice, systemdSuffix)
	if !ok || name == "" || strings.Contains(name, "/") {
		return "", fmt.Errorf("expand systemd slice %q: %w", slice, ErrBadComponent)
	}
	var b strings.Builder
	prefix := ""
	for _, c := range strings.Split(name, "-") {
		if c == "" {
			return "", fmt.Errorf("expand systemd slice %q: %w: empty component", slice, ErrBadComponent)
		}
		b.WriteString("/" + prefix + c + systemdSuffix)
		prefix += c + "-"
	}
	return b.String(), nil
}

// PodUIDOf parses the name of a directory found in a QoS cgroup whose last
// component is qosBase (e.g. "besteffort", or "kubepods-besteffort.slice"
// with the systemd driver) back into the pod UID that PodParent put there.
// It reports false for any other name: the QoS children of kubepods,
// container cgroups, and names no PodParent makes.
func PodUIDOf(d Driver, qosBase, name string) (types.UID, bool) {
	var uid string
	switch d {
	case Cgroupfs:
		u, ok := strings.CutPrefix(name, PodPrefix)
		if !ok {
			return "", false
		}
		uid = u
	case Systemd:
		unit, ok := strings.CutSuffix(qosBase, systemdSuffix)
		if !ok {
			return "", false
		}
		rest, ok := strings.CutPrefix(name, unit+"-"+PodPrefix)
		if !ok {
			return "", false
		}
		if rest, ok = strings.CutSuffix(rest, systemdSuffix); !ok {
			return "", false
		}
		// PodParent escaped '-' to '_'; UIDs have no '_' of their own.
		uid = strings.ReplaceAll(rest, "_", "-")
	default:
		return "", false
	}
	if checkUID(types.UID(uid)) != nil {
		return "", false
	}
	return types.UID(uid), true
}

// BeneathPod reports whether the cgroup at fromRoot lies beneath a pod
// cgroup that PodParent names with driver d: a container's cgroup, or
// deeper. fromRoot is the cgroup's path from the kubepods root on, the
// root's own name first ("kubepods/burstable/pod<uid>/<ctr>",
// "kubepods.slice/kubepods-pod<uid>.slice/cri-containerd-<id>.scope"):
// what lies above the root (the agent's own cgroup, under a relative
// root, may itself be a pod's) is not looked at. kubepods itself, its QoS
// cgroups and the pod cgroups are not beneath one.
func BeneathPod(d Driver, fromRoot string) bool {
	parts := strings.Split(strings.Trim(fromRoot, "/"), "/")
	for i := 1; i < len(parts)-1; i++ {
		if _, ok := PodUIDOf(d, parts[i-1], parts[i]); ok {
			return true
		}
	}
	return false
}

// IsPod reports whether fromRoot (as BeneathPod's) is a pod's own cgroup:
// its last two components name a pod ("kubepods/burstable/pod<uid>").
func IsPod(d Driver, fromRoot string) bool {
	parts := strings.Split(strings.Trim(fromRoot, "/"), "/")
	if len(parts) < 2 {
		return false
	}
	_, ok := PodUIDOf(d, parts[len(parts)-2], parts[len(parts)-1])
	return ok
}
