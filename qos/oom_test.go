package qos

import (
	"errors"
	"math"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

const gib = int64(1) << 30

func TestOOMScoreAdj(t *testing.T) {
	full := res("cpu", "1", "memory", "1Gi")
	sidecar := ctr("s", res("memory", "10Mi"), nil)
	sidecar.RestartPolicy = always()
	bigSidecar := ctr("s", res("memory", "8Gi"), nil)
	bigSidecar.RestartPolicy = always()
	nodeCritical := pod(nil, ctr("a", nil, nil))
	nodeCritical.Spec.PriorityClassName = SystemNodeCritical
	clusterCritical := pod(nil, ctr("a", nil, nil))
	clusterCritical.Spec.PriorityClassName = SystemClusterCritical

	tests := []struct {
		name      string
		pod       *corev1.Pod
		container int // index into init containers when negative: -1 is InitContainers[0]
		capacity  int64
		want      int
	}{
		{"a Guaranteed pod gets -997", pod(nil, ctr("a", full, full)), 0, 16 * gib, -997},
		{"a BestEffort pod gets 1000", pod(nil, ctr("a", nil, nil)), 0, 16 * gib, 1000},
		{"a node-critical BestEffort pod gets -997", nodeCritical, 0, 16 * gib, -997},
		{"a cluster-critical BestEffort pod is not protected", clusterCritical, 0, 16 * gib, 1000},
		{"a Burstable container asking for a tenth of memory gets 900", pod(nil, ctr("a", res("memory", "1Gi"), nil)), 0, 10 * gib, 900},
		{"the division truncates toward zero", pod(nil, ctr("a", res("memory", "1Gi"), nil)), 0, 3 * gib, 667},
		{"a Burstable container asking for all memory is raised to 3", pod(nil, ctr("a", res("memory", "16Gi"), nil)), 0, 16 * gib, 3},
		{"a Burstable container asking for more than all memory is raised to 3", pod(nil, ctr("a", res("memory", "64Gi"), nil)), 0, 16 * gib, 3},
		{"a Burstable score of exactly 2 is raised to 3", pod(nil, ctr("a", res("memory", "998"), nil)), 0, 1000, 3},
		{"a Burstable score of exactly 3 stays", pod(nil, ctr("a", res("memory", "997"), nil)), 0, 1000, 3},
		{"a Burstable score of 4 stays", pod(nil, ctr("a", res("memory", "996"), nil)), 0, 1000, 4},
		{"a Burstable container without a memory request gets 999", pod(nil, ctr("a", res("cpu", "1"), nil)), 0, 16 * gib, 999},
		{"a tiny memory request rounds to 1000 and becomes 999", pod(nil, ctr("a", res("memory", "1"), nil)), 0, 16 * gib, 999},
		{"a memory limit alone counts as the request", pod(nil, ctr("a", nil, res("memory", "8Gi"))), 0, 16 * gib, 500},
		{"the other containers of a Burstable pod do not matter", pod(nil, ctr("a", full, full), ctr("b", res("memory", "4Gi"), nil)), 0, 16 * gib, 1000 - 1000/16},
		{"a request above int64/1000 does not overflow", pod(nil, ctr("a", res("memory", "8Ei"), nil)), 0, math.MaxInt64, 3},
		{"a sidecar with a small request is lowered to the smallest app container's score", pod([]corev1.Container{sidecar}, ctr("a", res("memory", "4Gi"), nil), ctr("b", res("memory", "2Gi"), nil)), -1, 16 * gib, 875},
		{"a sidecar with a large request keeps its own lower score", pod([]corev1.Container{bigSidecar}, ctr("a", res("memory", "2Gi"), nil)), -1, 16 * gib, 500},
		{"an ordinary init container is scored on its own request", pod([]corev1.Container{ctr("i", res("memory", "1Gi"), nil)}, ctr("a", res("memory", "4Gi"), nil)), -1, 16 * gib, 938},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &tt.pod.Spec.Containers[0]
			if tt.container < 0 {
				c = &tt.pod.Spec.InitContainers[-tt.container-1]
			}
			got, err := OOMScoreAdj(tt.pod, c, tt.capacity)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("OOMScoreAdj = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestOOMScoreAdjRefusesANonPositiveCapacity(t *testing.T) {
	for _, capacity := range []int64{0, -1} {
		p := pod(nil, ctr("a", res("memory", "1Gi"), nil))
		if _, err := OOMScoreAdj(p, &p.Spec.Containers[0], capacity); !errors.Is(err, ErrBadCapacity) {
			t.Errorf("capacity %d: err = %v, want ErrBadCapacity", capacity, err)
		}
	}
}

func TestClampForCapability(t *testing.T) {
	tests := []struct {
		name        string
		v           int
		hasCap      bool
		minAllowed  int
		want        int
		wantClamped bool
	}{
		{"with CAP_SYS_RESOURCE a negative value is written as is", -997, true, 0, -997, false},
		{"without CAP_SYS_RESOURCE a value below the minimum is raised to it", -997, false, 0, 0, true},
		{"without CAP_SYS_RESOURCE a value below a negative minimum is raised to it", -999, false, -998, -998, true},
		{"without CAP_SYS_RESOURCE a value at the minimum is written as is", -998, false, -998, -998, false},
		{"without CAP_SYS_RESOURCE raising is always allowed", 500, false, 0, 500, false},
		{"a value above the kernel's maximum is lowered to 1000", 1200, true, 0, 1000, true},
		{"a value below the kernel's minimum is raised to -1000", -1200, true, 0, -1000, true},
		{"a minimum above 1000 cannot push the value out of range", 10, false, 5000, 1000, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, clamped := ClampForCapability(tt.v, tt.hasCap, tt.minAllowed)
			if got != tt.want || clamped != tt.wantClamped {
				t.Fatalf("ClampForCapability(%d, %v, %d) = %d, %v; want %d, %v", tt.v, tt.hasCap, tt.minAllowed, got, clamped, tt.want, tt.wantClamped)
			}
		})
	}
}

// FuzzOOMScoreAdj checks that any memory request and capacity give a score the
// kernel accepts and that Burstable scores stay in [3, 999].
func FuzzOOMScoreAdj(f *testing.F) {
	f.Add(int64(1<<30), int64(16<<30), false)
	f.Add(int64(0), int64(1), true)
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64), false)
	f.Fuzz(func(t *testing.T, request, capacity int64, sidecar bool) {
		if capacity <= 0 {
			return
		}
		p := pod(nil, ctr("a", res("memory", "1Gi"), nil))
		c := ctr("s", nil, nil)
		c.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: *resourceBytes(request)}
		if sidecar {
			c.RestartPolicy = always()
			p.Spec.InitContainers = []corev1.Container{c}
		} else {
			p.Spec.Containers = append(p.Spec.Containers, c)
		}
		got, err := OOMScoreAdj(p, &c, capacity)
		if err != nil {
			t.Fatal(err)
		}
		if got < MinBurstableOOMScoreAdj || got > MaxBurstableOOMScoreAdj {
			t.Fatalf("Burstable score %d outside [3, 999] for request %d capacity %d", got, request, capacity)
		}
	})
}
