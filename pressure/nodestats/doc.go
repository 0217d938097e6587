// Package nodestats senses node-level statistics and turns them into the
// kubelet's node eviction signals: /proc/meminfo, /proc/vmstat, statfs of
// the kubelet's nodefs and imagefs and the pid.available inputs, combined
// with the memory usage of the root (and pod root) memory cgroup, which
// package cgstat reads (cgstat.CgroupMemory, ReadCgroupMemoryV1/V2: every
// cgroup file is read in the cgroups room). It only senses: thresholds,
// grace periods and decisions live in package eviction.
//
// The signals are defined exactly as the kubelet defines them, and every
// formula names the Kubernetes, cAdvisor or runc source it follows:
//
//	memory.available            = MemTotal - workingSet(root cgroup)
//	allocatableMemory.available = limit(kubepods) - workingSet(kubepods)
//	nodefs.available            = f_bavail * f_frsize  of the kubelet root dir
//	nodefs.inodesFree           = f_ffree              of the kubelet root dir
//	imagefs.available           = f_bavail * f_frsize  of the image store
//	imagefs.inodesFree          = f_ffree              of the image store
//	pid.available               = min(pid_max, threads-max) - tasks (loadavg)
//
// where workingSet = usage - inactive file, floored at 0, and usage is
// memory.usage_in_bytes (v1), memory.current (v2), or anon + file from the
// v2 root's memory.stat (the v2 root has no memory.current), as
// cgstat.CgroupMemory documents.
//
// Invariants:
//
//   - Every reader takes its path (a file, or a root directory such as
//     /proc), so every parser is tested against fixture files. Nothing
//     here reads or writes a cgroup file, and nothing writes to /proc or
//     /sys.
//   - Memory values are bytes: meminfo's kB are multiplied by 1024, with
//     overflow checked.
//   - A value that could not be read is never reported as 0: readers
//     return an error, and optional keys carry a presence bit (Has, Get).
//     A missing file matches ErrUnsupported; content that does not parse,
//     or that lacks a key every supported kernel writes, is a *ParseError
//     naming the file and line that matches ErrMalformed.
//   - statfs(2) of a hung filesystem cannot be cancelled: FSProbe bounds
//     the wait, keeps at most one call in flight per filesystem, and
//     reports a filesystem that did not answer in time with an error
//     matching ErrTimeout (unknown: the caller leaves its signals out).
//   - Unknown meminfo keys and vmstat counters are skipped, so new kernels
//     parse; lines that do not have the kernel's shape are errors.
//   - ParseMeminfo and ParseVmstat do not allocate unless they fail, and
//     MeminfoReader and VmstatReader re-read through an open descriptor
//     without allocating, for the pressure tick.
//   - Signal computations are pure: values and a time in, an Observation
//     out. Available is never clamped (the kubelet does not clamp it); the
//     working set is floored at 0 as cAdvisor floors it.
//   - There is no package-level mutable state; readers are not safe for
//     concurrent use, everything else is.
package nodestats
