package bench

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// EvictionCandidate is a running pod as the memory ranking sees it.
type EvictionCandidate struct {
	UID             types.UID
	Namespace, Name string
	QOS             corev1.PodQOSClass
	Priority        int32
	// MemoryRequest is the sum of the pod's memory requests, MemoryUsage
	// its pod cgroup's working set, in bytes.
	MemoryRequest, MemoryUsage int64
	// CgroupParent is the pod cgroup (kubepods.Cgroups.Parent).
	CgroupParent string
}

// Key is "namespace/name".
func (c EvictionCandidate) Key() string { return c.Namespace + "/" + c.Name }

// The kubelet's memory ranking (pkg/kubelet/eviction/helpers.go
// rankMemoryPressure: orderedBy(exceedMemoryRequests, priority, memory)),
// as comparators that return < 0 when a is to be evicted before b.

// byExceedsRequests puts pods whose usage exceeds their request first.
func byExceedsRequests(a, b EvictionCandidate) int {
	ea, eb := a.MemoryUsage > a.MemoryRequest, b.MemoryUsage > b.MemoryRequest
	switch {
	case ea == eb:
		return 0
	case ea:
		return -1
	}
	return 1
}

// byPriority puts lower priorities first.
func byPriority(a, b EvictionCandidate) int { return cmp.Compare(a.Priority, b.Priority) }

// byUsageAboveRequest puts the larger usage above request first.
func byUsageAboveRequest(a, b EvictionCandidate) int {
	return cmp.Compare(b.MemoryUsage-b.MemoryRequest, a.MemoryUsage-a.MemoryRequest)
}

// byIdentity makes the order total (the kubelet's is not): namespace,
// name, then UID.
func byIdentity(a, b EvictionCandidate) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.UID, b.UID))
}

// RankMemory sorts pods (in place, stably) in the kubelet's order of
// eviction under memory pressure and returns them: usage above request
// first, then lower priority, then larger usage above request; ties by
// identity.
func RankMemory(pods []EvictionCandidate) []EvictionCandidate {
	slices.SortStableFunc(pods, func(a, b EvictionCandidate) int {
		return cmp.Or(byExceedsRequests(a, b), byPriority(a, b), byUsageAboveRequest(a, b), byIdentity(a, b))
	})
	return pods
}
