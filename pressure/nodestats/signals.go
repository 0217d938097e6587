package nodestats

import (
	"time"

	"github.com/nodeguard/nodeguard/cgroups/cgstat"
)

// Signal is a kubelet eviction signal, named as the kubelet names it
// (kubernetes pkg/kubelet/eviction/api/types.go).
type Signal string

// The node-level signals nodestats computes.
const (
	// SignalMemoryAvailable is memory.available: node memory capacity
	// minus the root cgroup's working set.
	SignalMemoryAvailable Signal = "memory.available"
	// SignalAllocatableMemoryAvailable is allocatableMemory.available:
	// the pod cgroup root's memory limit minus its working set.
	SignalAllocatableMemoryAvailable Signal = "allocatableMemory.available"
	// SignalNodeFsAvailable is nodefs.available: available bytes on the
	// kubelet root directory's filesystem.
	SignalNodeFsAvailable Signal = "nodefs.available"
	// SignalNodeFsInodesFree is nodefs.inodesFree: free inodes there.
	SignalNodeFsInodesFree Signal = "nodefs.inodesFree"
	// SignalImageFsAvailable is imagefs.available: available bytes on the
	// runtime's image filesystem.
	SignalImageFsAvailable Signal = "imagefs.available"
	// SignalImageFsInodesFree is imagefs.inodesFree: free inodes there.
	SignalImageFsInodesFree Signal = "imagefs.inodesFree"
	// SignalPIDAvailable is pid.available: the task limit minus the
	// tasks that exist.
	SignalPIDAvailable Signal = "pid.available"
)

// Observation is one signal's value at one time, as the kubelet's
// signalObservation holds it: Available and Capacity are bytes for memory
// and filesystem space, counts for inodes and PIDs. Available is not
// clamped: like the kubelet's, it goes negative when usage exceeds
// capacity.
type Observation struct {
	Signal    Signal
	Available int64
	Capacity  int64
	Time      time.Time
}

// All signal formulas below are those of kubernetes
// pkg/kubelet/eviction/helpers.go makeSignalObservations (and
// helpers_others.go makeMemoryAvailableSignalObservation for
// memory.available), applied to the summary values the kubelet's stats
// providers build (pkg/kubelet/stats/helper.go
// cadvisorInfoToCPUandMemoryStats: AvailableBytes = memory limit - working
// set, where the root container's limit is the machine's memory capacity).
// The kubelet computes the memory differences in uint64 and converts to
// int64; int64 arithmetic gives the same numbers, negative ones included.

// MemoryAvailable returns memory.available:
//
//	capacity  = MemTotal (cAdvisor machine.GetMachineMemoryCapacity, the
//	            root container's memory limit)
//	available = capacity - root.WorkingSet()
//
// with memTotal in bytes (Meminfo.MemTotal) and root the root cgroup's
// usage (cgstat.ReadCgroupMemoryV1 or cgstat.ReadCgroupMemoryV2 of the
// memory hierarchy's mount, cgroups.Layout.Memory.Mount).
// The kubelet writes capacity as available + working set, which is the
// same number. Swap is not counted: that is the kubelet's released
// behaviour (swap-aware eviction, KEP-2400, was still being proposed).
func MemoryAvailable(memTotal uint64, root cgstat.CgroupMemory, at time.Time) Observation {
	ws := int64(root.WorkingSet())
	avail := int64(memTotal) - ws
	return Observation{Signal: SignalMemoryAvailable, Available: avail, Capacity: avail + ws, Time: at}
}

// memoryUnlimited is cAdvisor's and the kubelet's "no limit" line: a
// cgroup memory limit above 2^62 bytes is taken as unlimited, not MaxInt64
// "due to rounding by the kernel" (pkg/kubelet/stats/helper.go
// isMemoryUnlimited).
const memoryUnlimited = 1 << 62

// AllocatableMemoryAvailable returns allocatableMemory.available:
//
//	available = allocatable - pods.WorkingSet()
//	capacity  = available + pods.WorkingSet() = allocatable
//
// where pods is the pod cgroup root's usage (kubepods; read it with
// cgstat.ReadCgroupMemoryV1 or V2, or a cgstat.Reader's
// Memory.CgroupMemory) and allocatable its memory
// limit in bytes (memory.limit_in_bytes or memory.max), which node
// allocatable enforcement sets. The kubelet reads the limit through
// cAdvisor and makes no observation when it is above 2^62 (unlimited);
// neither does this: ok is false then.
func AllocatableMemoryAvailable(allocatable uint64, pods cgstat.CgroupMemory, at time.Time) (Observation, bool) {
	if allocatable > memoryUnlimited {
		return Observation{}, false
	}
	ws := int64(pods.WorkingSet())
	avail := int64(allocatable) - ws
	return Observation{Signal: SignalAllocatableMemoryAvailable, Available: avail, Capacity: avail + ws, Time: at}, true
}

// FSAvailable returns a filesystem space signal (SignalNodeFsAvailable or
// SignalImageFsAvailable): available = AvailableBytes (f_bavail: what an
// unprivileged writer may still use), capacity = CapacityBytes.
func FSAvailable(s Signal, fs FSStats, at time.Time) Observation {
	return Observation{Signal: s, Available: int64(fs.AvailableBytes), Capacity: int64(fs.CapacityBytes), Time: at}
}

// FSInodesFree returns an inode signal (SignalNodeFsInodesFree or
// SignalImageFsInodesFree): available = InodesFree, capacity = Inodes. On a
// filesystem without an inode limit both are 0, and the kubelet still
// observes 0 of 0.
func FSInodesFree(s Signal, fs FSStats, at time.Time) Observation {
	return Observation{Signal: s, Available: int64(fs.InodesFree), Capacity: int64(fs.Inodes), Time: at}
}

// PIDAvailable returns pid.available:
//
//	capacity  = min(pid_max, threads-max)
//	available = capacity - tasks in existence (loadavg's total)
func PIDAvailable(p PIDStats, at time.Time) Observation {
	return Observation{Signal: SignalPIDAvailable, Available: p.Max() - p.Running, Capacity: p.Max(), Time: at}
}

// Inputs are the sensed values the node signals come from. A nil field
// means "not sensed", and the signals that need it are left out, as the
// kubelet leaves out a signal whose stats are missing.
type Inputs struct {
	// Meminfo supplies MemTotal, memory.available's capacity.
	Meminfo *Meminfo
	// Root is the root cgroup's memory usage.
	Root *cgstat.CgroupMemory
	// Pods is the pod cgroup root's memory usage, and PodsLimit its
	// memory limit in bytes (see AllocatableMemoryAvailable).
	Pods      *cgstat.CgroupMemory
	PodsLimit uint64
	// NodeFS and ImageFS are the kubelet root directory's and the image
	// store's filesystems. Pass the same stats twice when they share one.
	NodeFS, ImageFS *FSStats
	// PIDs are the pid.available inputs.
	PIDs *PIDStats
}

// AppendObservations appends to dst the observations that in supports,
// all stamped at, in this order: memory.available,
// allocatableMemory.available, nodefs.available, nodefs.inodesFree,
// imagefs.available, imagefs.inodesFree, pid.available. It does not
// allocate when dst has room for seven.
func AppendObservations(dst []Observation, in Inputs, at time.Time) []Observation {
	if in.Meminfo != nil && in.Root != nil {
		dst = append(dst, MemoryAvailable(in.Meminfo.MemTotal, *in.Root, at))
	}
	if in.Pods != nil {
		if o, ok := AllocatableMemoryAvailable(in.PodsLimit, *in.Pods, at); ok {
			dst = append(dst, o)
		}
	}
	if in.NodeFS != nil {
		dst = append(dst,
			FSAvailable(SignalNodeFsAvailable, *in.NodeFS, at),
			FSInodesFree(SignalNodeFsInodesFree, *in.NodeFS, at))
	}
	if in.ImageFS != nil {
		dst = append(dst,
			FSAvailable(SignalImageFsAvailable, *in.ImageFS, at),
			FSInodesFree(SignalImageFsInodesFree, *in.ImageFS, at))
	}
	if in.PIDs != nil {
		dst = append(dst, PIDAvailable(*in.PIDs, at))
	}
	return dst
}
