// Package kubepods is the kubelet's pod cgroup hierarchy: how its cgroups
// are named for each cgroup driver and what resource settings they get
// (pure functions: strings and numbers, no filesystem), and Cgroups
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
// # Cgroups
//
// Cgroups makes and removes the pod cgroup hierarchy on the node:
// kubepods -> burstable|besteffort -> pod<uid> (Guaranteed pods directly
// under kubepods), with the pod-level limits and CPU weights the kubelet
// sets, and node allocatable on kubepods. How the cgroups come to exist is
// the driver's (the placer interface; each driver is one file):
//
//   - cgroupfs.go: Cgroups makes the directories in every mounted
//     hierarchy and writes the controller files itself; on cgroup2 each
//     level enables its controllers for the next (cgroup.subtree_control).
//   - systemd.go: the cgroups are transient slice units that systemd makes
//     over D-Bus (StartTransientUnit with Wants= on the parent slice,
//     accounting on, DefaultDependencies=false, the resources as unit
//     properties: MemoryMax, CPUWeight, CPUQuotaPerSecUSec, and TasksMax
//     where a pids limit is set),
//     updated with SetUnitProperties and removed with StopUnit, as the
//     kubelet's systemd cgroup manager does through runc.
//
// Everything else is the same for both: a slice's cgroup is the directory
// its expanded name spells in every hierarchy, so resolving, reading,
// listing (a container's cgroup by either driver's name: ContainerProcs),
// killing (cgroup.kill, or SIGKILL over cgroup.procs on v1, through
// pidfds: cgroups.SigkillTree) and
// the placement checks (placement.go) go through the files.
//
// Invariants:
//   - On a node the root is absolute ("/": /kubepods, /kubepods.slice) and
//     the runtime is handed absolute parents, so that the containers land
//     in the cgroups Cgroups limits and watches whatever cgroup the
//     runtime runs in. A relative root is resolved beneath this process's
//     own cgroup; on pure v2 (one hierarchy) the runtime still gets it
//     spelled absolute. Only on a host with v1 hierarchies, where this
//     process's cgroup differs between hierarchies, is the runtime handed a
//     relative parent, and then it must share this process's cgroup
//     (CheckRuntimeCgroup), as the private test runtime does.
//   - Every sandbox is checked once it runs (CheckSandbox): its cgroup must
//     be beneath its pod cgroup, named as the driver names it; a runtime
//     reporting the other driver (CRI RuntimeConfig) is refused at start.
//   - Only the cgroups of the hierarchy are made, written or removed;
//     nothing above the root is touched, except that with cgroupfs on
//     cgroup2 each level above a pod delegates its controllers.
//   - Remove refuses a cgroup with processes (ErrPopulated) and removes
//     empty ones deepest first; a cgroup already gone is not an error.
//   - The systemd driver needs systemd as PID 1: without it New fails with
//     ErrUnsupported, saying to use cgroupfs.
package kubepods
