package eviction

import (
	"cmp"
	"slices"
	"strings"

	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// podCmp compares two pods; negative ranks a first (evicted first).
type podCmp func(a, b *Pod) int

// orderedBy chains comparators: the first that tells the pods apart wins.
func orderedBy(cmps ...podCmp) podCmp {
	return func(a, b *Pod) int {
		for _, c := range cmps {
			if r := c(a, b); r != 0 {
				return r
			}
		}
		return 0
	}
}

// cmpBool ranks true first, as the kubelet's cmpBool.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}

// byPriority ranks the lower priority first.
func byPriority(a, b *Pod) int { return cmp.Compare(a.Priority, b.Priority) }

// exceedsMemoryRequest ranks pods whose working set exceeds their memory
// request first; a pod without stats goes before one with (the kubelet's
// exceedMemoryRequests).
func exceedsMemoryRequest(a, b *Pod) int {
	if a.UsageUnknown || b.UsageUnknown {
		return cmpBool(a.UsageUnknown, b.UsageUnknown)
	}
	return cmpBool(a.MemoryUsage > a.MemoryRequest, b.MemoryUsage > b.MemoryRequest)
}

// memoryAboveRequest ranks the larger usage above request first (the
// kubelet's memory comparator).
func memoryAboveRequest(a, b *Pod) int {
	if a.UsageUnknown || b.UsageUnknown {
		return cmpBool(a.UsageUnknown, b.UsageUnknown)
	}
	return cmp.Compare(b.MemoryUsage-b.MemoryRequest, a.MemoryUsage-a.MemoryRequest)
}

// exceedsDiskRequest and diskAboveRequest are the kubelet's
// exceedDiskRequests and disk comparators for ephemeral-storage.
func exceedsDiskRequest(a, b *Pod) int {
	return cmpBool(a.EphemeralUsage > a.EphemeralRequest, b.EphemeralUsage > b.EphemeralRequest)
}

func diskAboveRequest(a, b *Pod) int {
	return cmp.Compare(b.EphemeralUsage-b.EphemeralRequest, a.EphemeralUsage-a.EphemeralRequest)
}

// The kubelet ranks inodes with the same two comparators on the inodes
// resource, for which a pod has no request: "exceeds" means uses any. Its
// disk comparator then subtracts the ephemeral-storage request (bytes) from
// the inode count, mixing units; nodeguard ranks by inodes alone.
// A pod without a figure goes first, as the kubelet's comparators put a
// pod without stats first.
func usesInodes(a, b *Pod) int {
	if a.InodesUnknown || b.InodesUnknown {
		return cmpBool(a.InodesUnknown, b.InodesUnknown)
	}
	return cmpBool(a.Inodes > 0, b.Inodes > 0)
}

func moreInodes(a, b *Pod) int {
	if a.InodesUnknown || b.InodesUnknown {
		return cmpBool(a.InodesUnknown, b.InodesUnknown)
	}
	return cmp.Compare(b.Inodes, a.Inodes)
}

func morePIDs(a, b *Pod) int {
	if a.PIDsUnknown || b.PIDsUnknown {
		return cmpBool(a.PIDsUnknown, b.PIDsUnknown)
	}
	return cmp.Compare(b.PIDs, a.PIDs)
}

func moreStall(a, b *Pod) int     { return cmp.Compare(b.ReclaimStall, a.ReclaimStall) }
func lowerCgroupID(a, b *Pod) int { return cmp.Compare(a.CgroupID, b.CgroupID) }
func lowerUID(a, b *Pod) int      { return strings.Compare(string(a.UID), string(b.UID)) }
func tieBreak(a, b *Pod) int      { return orderedBy(moreStall, lowerCgroupID, lowerUID)(a, b) }
func rankMemory(a, b *Pod) int {
	return orderedBy(exceedsMemoryRequest, byPriority, memoryAboveRequest, tieBreak)(a, b)
}
func rankDiskSpace(a, b *Pod) int {
	return orderedBy(exceedsDiskRequest, byPriority, diskAboveRequest, tieBreak)(a, b)
}
func rankDiskInodes(a, b *Pod) int {
	return orderedBy(usesInodes, byPriority, moreInodes, tieBreak)(a, b)
}
func rankPIDs(a, b *Pod) int { return orderedBy(byPriority, morePIDs, tieBreak)(a, b) }

// rankFor returns the ranking of a signal, the kubelet's
// buildSignalToRankFunc: rankMemoryPressure for both memory signals,
// rankDiskPressureFunc for space and inodes (every fs stat counted: a pod's
// EphemeralUsage already sums its writable layers, logs and local
// volumes), rankPIDPressure for pid.available. Ties are broken by reclaim
// stall (more first), then cgroup id and UID (lower first), so that the
// order is total.
func rankFor(sig nodestats.Signal) podCmp {
	switch sig {
	case nodestats.SignalNodeFsAvailable, nodestats.SignalImageFsAvailable:
		return rankDiskSpace
	case nodestats.SignalNodeFsInodesFree, nodestats.SignalImageFsInodesFree:
		return rankDiskInodes
	case nodestats.SignalPIDAvailable:
		return rankPIDs
	}
	return rankMemory
}

// Rank returns the pods in the order the policy evicts them under
// pressure on sig (memory.available for PSI rules), critical and exempt
// pods included: the kubelet's ranking with nodeguard's tie-breakers. It
// does not change pods.
func Rank(pods []Pod, sig nodestats.Signal) []*Pod {
	out := make([]*Pod, len(pods))
	for i := range pods {
		out[i] = &pods[i]
	}
	slices.SortStableFunc(out, rankFor(sig))
	return out
}
