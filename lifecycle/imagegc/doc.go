// Package imagegc is the image side of the node's disk, as the kubelet's
// image garbage collector and its CRI stats provider have it.
//
// ImageFS observes the image filesystem the runtime names in CRI
// ImageFsInfo, with a bounded statfs of its mountpoint, for the imagefs.*
// eviction signals. Collector removes unused images least recently used
// first between the kubelet's imageGCHighThresholdPercent and
// imageGCLowThresholdPercent, every 5 min (Policy), never one a container
// uses (anyone's, running or not), one pinned (by the runtime, or the
// runtime's sandbox image) or one seen for less than imageMinimumGCAge;
// DeleteUnusedImages frees what it can at once, the eviction manager's
// node-level reclaim for the disk signals (lifecycle.NodeReclaimer).
//
// It talks to the runtime through small interfaces (the lifecycle's CRI
// client satisfies them) and knows nothing of pods.
package imagegc
