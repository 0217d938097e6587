package eviction

import "github.com/nodeguard/nodeguard/evictionapi"

// The eviction vocabulary lives in package evictionapi, so that the act
// rooms need not import the policy; these names let the policy's code and
// the assembly say eviction.Decision.
type (
	Pod           = evictionapi.Pod
	PodRef        = evictionapi.PodRef
	Decision      = evictionapi.Decision
	Actor         = evictionapi.Actor
	Timing        = evictionapi.Timing
	Condition     = evictionapi.Condition
	Resource      = evictionapi.Resource
	NodeReclaimer = evictionapi.NodeReclaimer
	AdmitError    = evictionapi.AdmitError
)

const (
	MemoryPressure         = evictionapi.MemoryPressure
	DiskPressure           = evictionapi.DiskPressure
	PIDPressure            = evictionapi.PIDPressure
	ResourceMemory         = evictionapi.ResourceMemory
	ResourceDisk           = evictionapi.ResourceDisk
	ResourcePID            = evictionapi.ResourcePID
	ResourceCPU            = evictionapi.ResourceCPU
	ResourceIO             = evictionapi.ResourceIO
	AdmitReason            = evictionapi.AdmitReason
	NextVictimOOMScoreAdj  = evictionapi.NextVictimOOMScoreAdj
	SystemCriticalPriority = evictionapi.SystemCriticalPriority
)

var (
	ErrNotAdmitted     = evictionapi.ErrNotAdmitted
	ErrEvictionRefused = evictionapi.ErrEvictionRefused
)
