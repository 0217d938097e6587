package kubepods

import (
	"math"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodeguard/nodeguard/qos"
)

// CPU conversion constants (pkg/kubelet/cm/helpers_linux.go).
const (
	// MinShares is the kernel's minimum cpu.shares (MIN_SHARES); it is also
	// what a zero cpu request maps to, so that a pod without requests really
	// gets the least CPU instead of the kernel default of 1024.
	MinShares uint64 = 2
	// MaxShares is the kernel's maximum cpu.shares (MAX_SHARES, 1<<18).
	MaxShares uint64 = 262144
	// SharesPerCPU is the cpu.shares of one whole CPU.
	SharesPerCPU = 1024
	// MilliCPUToCPU is the number of millicores in a CPU.
	MilliCPUToCPU = 1000
	// QuotaPeriod is the CFS period in microseconds the kubelet uses (100ms)
	// unless its CPUCFSQuotaPeriod feature is on.
	QuotaPeriod = 100000
	// MinQuotaPeriod is the smallest CFS quota the kernel accepts (1ms).
	MinQuotaPeriod = 1000
	// MaxWeight is the largest cgroup v2 cpu.weight.
	MaxWeight uint64 = 10000
	// PIDs is the node resource name of the process-ID limit
	// (pkg/kubelet/stats/pidlimit).
	PIDs corev1.ResourceName = "pid"
)

// ResourceConfig is the resource settings of one cgroup: the kubelet's
// cm.ResourceConfig reduced to what nodeguard sets. A nil field is left
// alone (not written).
type ResourceConfig struct {
	// CPUShares is cgroup v1 cpu.shares; nil on cgroup v2.
	CPUShares *uint64
	// CPUWeight is cgroup v2 cpu.weight; nil on cgroup v1.
	CPUWeight *uint64
	// CPUQuota is the CFS quota in microseconds per CPUPeriod; -1 means
	// unlimited ("max" in cgroup v2 cpu.max).
	CPUQuota *int64
	// CPUPeriod is the CFS period in microseconds.
	CPUPeriod *uint64
	// Memory is the memory limit in bytes (memory.limit_in_bytes, memory.max).
	Memory *int64
	// PidsLimit is pids.max.
	PidsLimit *int64
}

// MilliCPUToShares converts millicores to cpu.shares as the kubelet does:
// 1024 per CPU, rounded down, within [MinShares, MaxShares]; 0 gives
// MinShares.
func MilliCPUToShares(milliCPU int64) uint64 {
	// Shares reach MaxShares at 256 CPUs; checking first also keeps the
	// product below from overflowing.
	if milliCPU >= int64(MaxShares)*MilliCPUToCPU/SharesPerCPU {
		return MaxShares
	}
	shares := milliCPU * SharesPerCPU / MilliCPUToCPU
	if shares < int64(MinShares) {
		return MinShares
	}
	return uint64(shares)
}

// MilliCPUToQuota converts a cpu limit in millicores to a CFS quota for the
// given period (both in microseconds): milliCPU*period/1000, at least
// MinQuotaPeriod; 0 millicores give quota 0 (no limit). A product that would
// overflow int64 saturates at math.MaxInt64.
func MilliCPUToQuota(milliCPU, period int64) int64 {
	if milliCPU <= 0 {
		return 0
	}
	if period > 0 && milliCPU > math.MaxInt64/period {
		return math.MaxInt64
	}
	quota := milliCPU * period / MilliCPUToCPU
	if quota < MinQuotaPeriod {
		return MinQuotaPeriod
	}
	return quota
}

// CPUWeight converts cpu.shares to cgroup v2 cpu.weight as the kubelet does
// for the cgroups it manages (getCPUWeight in cgroup_manager_linux.go): the
// linear map of [2, 262144] onto [1, 10000]. Shares below 2 give 1.
func CPUWeight(shares uint64) uint64 {
	switch {
	case shares >= MaxShares:
		return MaxWeight
	case shares <= MinShares:
		return 1
	}
	return 1 + ((shares-2)*9999)/262142
}

// OCICPUWeight converts cpu.shares to cpu.weight as current OCI runtimes do
// for containers (opencontainers/cgroups ConvertCPUSharesToCgroupV2Value
// after kubernetes/kubernetes#131216): a quadratic in log2(shares) that maps
// 2 to 1, 1024 to 100 (the kernel default) and 262144 to 10000. Older runc
// (1.1, as on the development machines) uses the linear CPUWeight. 0 gives 0
// (unset).
func OCICPUWeight(shares uint64) uint64 {
	switch {
	case shares == 0:
		return 0
	case shares <= MinShares:
		return 1
	case shares >= MaxShares:
		return MaxWeight
	}
	l := math.Log2(float64(shares))
	exponent := (l*l+125*l)/612.0 - 7.0/34.0
	return uint64(math.Ceil(math.Pow(10, exponent)))
}

// setCPUShares stores shares in the field the cgroup version uses.
func (rc *ResourceConfig) setCPUShares(shares uint64, v2 bool) {
	if v2 {
		w := CPUWeight(shares)
		rc.CPUWeight = &w
		return
	}
	rc.CPUShares = &shares
}

// PodResources returns the settings of a pod's cgroup as ResourceConfigForPod
// in helpers_linux.go computes them, with the 100ms CFS period:
//
//   - cpu shares (or weight) from the pod's cpu requests (init containers
//     included as qos.PodRequests counts them); BestEffort pods get
//     MinShares and nothing else;
//   - Guaranteed pods get a CFS quota from their cpu limits and a memory
//     limit;
//   - a Burstable pod gets a CFS quota only when every app container and
//     sidecar has a cpu limit, and a memory limit only when every one has
//     a memory limit (a sidecar runs next to the app containers: a pod
//     limit made without its share would cap it by theirs; plain init
//     containers are not asked, but the largest init step's limit raises
//     the pod's);
//   - with enforceCPULimits false the quota is -1 (unlimited) wherever it
//     would be set.
//
// Pod pids limits are node configuration, not part of the pod, and are left
// nil.
func PodResources(pod *corev1.Pod, v2, enforceCPULimits bool) ResourceConfig {
	requests := qos.PodRequests(pod)
	limits := qos.PodLimits(pod)
	cpuLimitsDeclared, memoryLimitsDeclared := true, true
	for _, c := range limited(pod) {
		l := c.Resources.Limits
		if l.Cpu().IsZero() {
			cpuLimitsDeclared = false
		}
		if l.Memory().IsZero() {
			memoryLimitsDeclared = false
		}
	}
	cpuRequest := milli(requests, corev1.ResourceCPU)
	shares := MilliCPUToShares(cpuRequest)
	period := uint64(QuotaPeriod)
	quota := MilliCPUToQuota(milli(limits, corev1.ResourceCPU), QuotaPeriod)
	if !enforceCPULimits {
		quota = -1
	}
	memory := value(limits, corev1.ResourceMemory)

	var rc ResourceConfig
	switch qos.Class(pod) {
	case corev1.PodQOSGuaranteed:
		rc.setCPUShares(shares, v2)
		rc.CPUQuota, rc.CPUPeriod, rc.Memory = &quota, &period, &memory
	case corev1.PodQOSBurstable:
		rc.setCPUShares(shares, v2)
		if cpuLimitsDeclared {
			rc.CPUQuota, rc.CPUPeriod = &quota, &period
		}
		if memoryLimitsDeclared {
			rc.Memory = &memory
		}
	default:
		rc.setCPUShares(MinShares, v2)
	}
	return rc
}

// QOSShares returns the cpu shares of the Burstable and BestEffort QoS
// cgroups given the pods on the node (setCPUCgroupConfig in
// qos_container_manager_linux.go): BestEffort always MinShares, Burstable
// the shares of the sum of its pods' cpu requests. The Guaranteed pods live
// directly in kubepods and need no QoS cgroup. On cgroup v2 convert with
// CPUWeight.
func QOSShares(pods []*corev1.Pod) (burstable, bestEffort uint64) {
	var milliCPU int64
	for _, p := range pods {
		milliCPU += burstableMilliCPU(p)
	}
	return MilliCPUToShares(milliCPU), MinShares
}

// burstableMilliCPU is what p adds to the Burstable cgroup's shares: its
// cpu requests in millicores if it is Burstable, else 0.
func burstableMilliCPU(p *corev1.Pod) int64 {
	if qos.Class(p) != corev1.PodQOSBurstable {
		return 0
	}
	return milli(qos.PodRequests(p), corev1.ResourceCPU)
}

// KubepodsResources returns the settings of the kubepods cgroup when node
// allocatable is enforced on pods (getNodeAllocatableAbsolute and
// getCgroupConfig in node_container_manager_linux.go): for every resource
// in capacity, capacity minus systemReserved minus kubeReserved, never
// below zero; memory becomes the memory limit, cpu the shares (or weight)
// and PIDs the pids limit. Resources missing from capacity are left nil.
// The eviction thresholds are not subtracted: they are enforced by eviction,
// not by the cgroup.
func KubepodsResources(capacity, systemReserved, kubeReserved corev1.ResourceList, v2 bool) ResourceConfig {
	allocatable := corev1.ResourceList{}
	for name, q := range capacity {
		v := q.DeepCopy()
		if r, ok := systemReserved[name]; ok {
			v.Sub(r)
		}
		if r, ok := kubeReserved[name]; ok {
			v.Sub(r)
		}
		if v.Sign() < 0 {
			v = *resource.NewQuantity(0, q.Format)
		}
		allocatable[name] = v
	}
	var rc ResourceConfig
	if q, ok := allocatable[corev1.ResourceMemory]; ok {
		m := q.Value()
		rc.Memory = &m
	}
	if q, ok := allocatable[corev1.ResourceCPU]; ok {
		rc.setCPUShares(MilliCPUToShares(q.MilliValue()), v2)
	}
	if q, ok := allocatable[PIDs]; ok {
		p := q.Value()
		rc.PidsLimit = &p
	}
	return rc
}

func milli(l corev1.ResourceList, name corev1.ResourceName) int64 {
	q, ok := l[name]
	if !ok {
		return 0
	}
	return q.MilliValue()
}

func value(l corev1.ResourceList, name corev1.ResourceName) int64 {
	q, ok := l[name]
	if !ok {
		return 0
	}
	return q.Value()
}

// limited are the containers whose limits decide whether the pod's are
// declared: the app containers and the sidecars (init containers with
// restartPolicy Always), which run beside them for the pod's life.
func limited(pod *corev1.Pod) []*corev1.Container {
	out := make([]*corev1.Container, 0, len(pod.Spec.Containers)+len(pod.Spec.InitContainers))
	for i := range pod.Spec.Containers {
		out = append(out, &pod.Spec.Containers[i])
	}
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; qos.IsSidecar(pod, c) {
			out = append(out, c)
		}
	}
	return out
}
