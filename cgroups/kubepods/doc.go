// Package kubepods is the kubelet's pod cgroup hierarchy: how its cgroups
// are named for each cgroup driver and what resource settings they get
// (pure functions: strings and numbers, no filesystem), and the Manager
// that makes, limits, kills and removes them on the node.
//
// # Names and resources
//
// The hierarchy, for a root R (the kubelet's --cgroup-root, in cgroupfs form):
//
//	cgroupfs                              systemd
//	R/kubepods                            /kubepods.slice
//	R/kubepods/pod<uid>          (Guaranteed) /kubepods.slice/kubepods-pod<uid_>.slice
//	R/kubepods/burstable                  /kubepods.slice/kubepods-burstable.slice
//	R/kubepods/burstable/pod<uid>         .../kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice
//	R/kubepods/besteffort                 /kubepods.slice/kubepods-besteffort.slice
//	R/kubepods/besteffort/pod<uid>        .../kubepods-besteffort.slice/kubepods-besteffort-pod<uid_>.slice
//
// where <uid_> is the pod UID with every '-' replaced by '_'. A systemd name is
// the dash-joined chain of the escaped components, expanded into one slice per
// prefix as systemd (and runc's ExpandSlice) nest slices. With a root other
// than "/", the root's components lead every name ("/a" gives
// /a.slice/a-kubepods.slice/...). A relative cgroupfs root (no leading '/')
// gives relative paths, which runc resolves against its own cgroup in every
// hierarchy; systemd names are always absolute, so the systemd driver
// refuses a relative root.
//
// Sources the behaviour was checked against (kubernetes/kubernetes):
//
//   - pkg/kubelet/cm/cgroup_manager_linux.go: CgroupName, NewCgroupName
//     (components may contain neither '/' nor '_', so the '-' to '_' escaping
//     can be reversed), ToCgroupfs, ToSystemd, getCPUWeight;
//   - pkg/kubelet/cm/container_manager_linux.go and helpers_linux.go
//     (NodeAllocatableRoot): kubepods under the cgroup root;
//   - pkg/kubelet/cm/qos_container_manager_linux.go: Guaranteed pods directly
//     under kubepods, "burstable" and "besteffort" below it; BestEffort gets
//     cpu.shares 2, Burstable the shares of the sum of its pods' cpu requests;
//   - pkg/kubelet/cm/pod_container_manager_linux.go (GetPodContainerName) and
//     helpers_linux.go (GetPodCgroupNameSuffix): "pod" + UID;
//   - pkg/kubelet/cm/helpers_linux.go: MilliCPUToShares, MilliCPUToQuota,
//     ResourceConfigForPod;
//   - pkg/kubelet/cm/node_container_manager_linux.go: getCgroupConfig and
//     getNodeAllocatableAbsolute for the kubepods cgroup;
//   - runc libcontainer/cgroups/systemd ExpandSlice.
//
// Invariants: every name function either returns a name that the kubelet
// would produce for the same input or an error (the kubelet panics on the
// inputs this package refuses); pod UIDs may contain only ASCII letters,
// digits and '-'. Errors wrap ErrUnknownDriver, ErrUnknownClass or
// ErrBadComponent so that callers can tell unsupported from malformed input.
//
// # The Manager
//
// The Manager makes and removes the pod cgroup hierarchy on disk:
// kubepods -> burstable|besteffort -> pod<uid> (Guaranteed pods directly
// under kubepods), in every mounted hierarchy, with the pod-level limits
// and CPU weights the kubelet sets, and node allocatable on kubepods.
//
// Invariants:
//   - The cgroup root is resolved per hierarchy by cgroups: a
//     RELATIVE root lands beneath nodeguard's own cgroup in each hierarchy,
//     exactly where runc resolves the same relative cgroup_parent (runc is
//     started by a containerd that shares our cgroups), so the pod cgroup we
//     make and limit is the one the containers are put beneath.
//   - Only directories beneath the resolved root are ever made, written or
//     removed; nothing above it is touched, except that on cgroup2 each
//     level delegates its controllers to the next (cgroup.subtree_control).
//   - Remove takes away the pod's directory in every hierarchy (CRI removes
//     only the container leaves), deepest first, and reports what it could
//     not remove; a directory already gone is not an error.
//   - Only the cgroupfs layout is made on disk. The systemd driver's names
//     are computed by cgroups/kubepods, but making slices needs
//     systemd's D-Bus API, so Ensure refuses the systemd driver.
package kubepods
