package kubepods

import (
	"fmt"
	"math"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func res(kv ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

func ctr(name string, req, lim corev1.ResourceList) corev1.Container {
	return corev1.Container{Name: name, Image: "busybox", Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}
}

func pod(init []corev1.Container, app ...corev1.Container) *corev1.Pod {
	p := &corev1.Pod{}
	p.Name, p.Namespace, p.UID = "p", "default", "u"
	p.Spec.InitContainers, p.Spec.Containers = init, app
	return p
}

func TestMilliCPUToShares(t *testing.T) {
	tests := []struct {
		milli int64
		want  uint64
	}{
		{0, 2}, {1, 2}, {2, 2}, {3, 3}, {100, 102}, {250, 256}, {1000, 1024}, {1500, 1536},
		{255999, 262142}, {256000, 262144}, {300000, 262144}, {math.MaxInt64, 262144}, {-5, 2},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d millicores give %d shares", tt.milli, tt.want), func(t *testing.T) {
			if got := MilliCPUToShares(tt.milli); got != tt.want {
				t.Fatalf("got %d", got)
			}
		})
	}
}

func TestMilliCPUToQuota(t *testing.T) {
	tests := []struct {
		milli, want int64
	}{
		{0, 0}, {1, 1000}, {9, 1000}, {10, 1000}, {11, 1100}, {250, 25000}, {1000, 100000}, {2500, 250000},
		{math.MaxInt64, math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d millicores give a quota of %d us per 100ms", tt.milli, tt.want), func(t *testing.T) {
			if got := MilliCPUToQuota(tt.milli, QuotaPeriod); got != tt.want {
				t.Fatalf("got %d", got)
			}
		})
	}
}

func TestCPUWeight(t *testing.T) {
	tests := []struct {
		shares            uint64
		linear, quadratic uint64
	}{
		{0, 1, 0}, {2, 1, 1}, {3, 1, 2}, {102, 4, 17}, {1024, 39, 100}, {2048, 79, 174}, {262143, 9999, 10000}, {262144, 10000, 10000}, {1 << 20, 10000, 10000},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d shares give weight %d linearly and %d as OCI runtimes convert", tt.shares, tt.linear, tt.quadratic), func(t *testing.T) {
			if got := CPUWeight(tt.shares); got != tt.linear {
				t.Errorf("CPUWeight = %d", got)
			}
			if got := OCICPUWeight(tt.shares); got != tt.quadratic {
				t.Errorf("OCICPUWeight = %d", got)
			}
		})
	}
}

func ptrU(v uint64) *uint64 { return &v }
func ptrI(v int64) *int64   { return &v }

func TestPodResources(t *testing.T) {
	mi := int64(1 << 20)
	tests := []struct {
		name    string
		pod     *corev1.Pod
		v2      bool
		enforce bool
		want    ResourceConfig
	}{
		{
			name:    "a Guaranteed pod gets shares, quota and memory",
			pod:     pod(nil, ctr("a", nil, res("cpu", "500m", "memory", "100Mi")), ctr("b", nil, res("cpu", "250m", "memory", "28Mi"))),
			enforce: true,
			want:    ResourceConfig{CPUShares: ptrU(768), CPUQuota: ptrI(75000), CPUPeriod: ptrU(100000), Memory: ptrI(128 * mi)},
		},
		{
			name:    "a Guaranteed pod on cgroup v2 gets a weight instead of shares",
			pod:     pod(nil, ctr("a", nil, res("cpu", "1", "memory", "100Mi"))),
			v2:      true,
			enforce: true,
			want:    ResourceConfig{CPUWeight: ptrU(39), CPUQuota: ptrI(100000), CPUPeriod: ptrU(100000), Memory: ptrI(100 * mi)},
		},
		{
			name:    "without cpu limit enforcement the quota is unlimited",
			pod:     pod(nil, ctr("a", nil, res("cpu", "1", "memory", "100Mi"))),
			enforce: false,
			want:    ResourceConfig{CPUShares: ptrU(1024), CPUQuota: ptrI(-1), CPUPeriod: ptrU(100000), Memory: ptrI(100 * mi)},
		},
		{
			name:    "a Burstable pod where every container has limits gets quota and memory",
			pod:     pod(nil, ctr("a", res("cpu", "100m", "memory", "10Mi"), res("cpu", "1", "memory", "100Mi"))),
			enforce: true,
			want:    ResourceConfig{CPUShares: ptrU(102), CPUQuota: ptrI(100000), CPUPeriod: ptrU(100000), Memory: ptrI(100 * mi)},
		},
		{
			name:    "a Burstable pod where one container lacks limits gets shares only",
			pod:     pod(nil, ctr("a", res("cpu", "100m"), res("cpu", "1", "memory", "100Mi")), ctr("b", res("cpu", "100m"), nil)),
			enforce: true,
			want:    ResourceConfig{CPUShares: ptrU(204)},
		},
		{
			name:    "a Burstable pod with only memory limits gets memory but no quota",
			pod:     pod(nil, ctr("a", res("cpu", "100m", "memory", "10Mi"), res("memory", "100Mi"))),
			enforce: true,
			want:    ResourceConfig{CPUShares: ptrU(102), Memory: ptrI(100 * mi)},
		},
		{
			name:    "a larger init container limit raises the pod memory limit",
			pod:     pod([]corev1.Container{ctr("i", res("memory", "10Mi"), res("memory", "300Mi"))}, ctr("a", res("memory", "10Mi"), res("memory", "100Mi"))),
			enforce: true,
			want:    ResourceConfig{CPUShares: ptrU(2), Memory: ptrI(300 * mi)},
		},
		{
			name:    "an init container without limits does not stop the pod memory limit",
			pod:     pod([]corev1.Container{ctr("i", nil, nil)}, ctr("a", res("memory", "10Mi"), res("memory", "100Mi"))),
			enforce: true,
			want:    ResourceConfig{CPUShares: ptrU(2), Memory: ptrI(100 * mi)},
		},
		{
			name: "a sidecar's limit adds to the app containers' in the pod's",
			pod: pod([]corev1.Container{sidecar(ctr("s", res("cpu", "100m", "memory", "10Mi"), res("cpu", "500m", "memory", "50Mi")))},
				ctr("a", res("cpu", "100m", "memory", "10Mi"), res("cpu", "1", "memory", "100Mi"))),
			enforce: true,
			want:    ResourceConfig{CPUShares: ptrU(204), CPUQuota: ptrI(150000), CPUPeriod: ptrU(100000), Memory: ptrI(150 * mi)},
		},
		{
			name:    "a sidecar without limits leaves the pod without a limit, as an app container would",
			pod:     pod([]corev1.Container{sidecar(ctr("s", res("memory", "10Mi"), nil))}, ctr("a", res("memory", "10Mi"), res("cpu", "1", "memory", "100Mi"))),
			enforce: true,
			want:    ResourceConfig{CPUShares: ptrU(1024)},
		},
		{
			name:    "the largest init cpu request sets the shares",
			pod:     pod([]corev1.Container{ctr("i", res("cpu", "2"), nil)}, ctr("a", res("cpu", "1"), nil)),
			enforce: true,
			want:    ResourceConfig{CPUShares: ptrU(2048)},
		},
		{
			name:    "a BestEffort pod gets the minimum shares and nothing else",
			pod:     pod(nil, ctr("a", nil, nil)),
			enforce: true,
			want:    ResourceConfig{CPUShares: ptrU(2)},
		},
		{
			name:    "a BestEffort pod on cgroup v2 gets weight 1",
			pod:     pod(nil, ctr("a", nil, nil)),
			v2:      true,
			enforce: true,
			want:    ResourceConfig{CPUWeight: ptrU(1)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PodResources(tt.pod, tt.v2, tt.enforce)
			if g, w := show(got), show(tt.want); g != w {
				t.Fatalf("PodResources =\n  %s\nwant\n  %s", g, w)
			}
		})
	}
}

func show(rc ResourceConfig) string {
	f := func(name string, p any) string {
		switch v := p.(type) {
		case *uint64:
			if v != nil {
				return fmt.Sprintf("%s=%d ", name, *v)
			}
		case *int64:
			if v != nil {
				return fmt.Sprintf("%s=%d ", name, *v)
			}
		}
		return ""
	}
	return f("shares", rc.CPUShares) + f("weight", rc.CPUWeight) + f("quota", rc.CPUQuota) + f("period", rc.CPUPeriod) + f("memory", rc.Memory) + f("pids", rc.PidsLimit)
}

func TestQOSShares(t *testing.T) {
	tests := []struct {
		name          string
		pods          []*corev1.Pod
		wantBurstable uint64
	}{
		{"no pods give the minimum shares", nil, 2},
		{"Burstable requests add up", []*corev1.Pod{
			pod(nil, ctr("a", res("cpu", "500m"), nil)),
			pod(nil, ctr("a", res("cpu", "250m", "memory", "1Mi"), nil)),
		}, 768},
		{"Guaranteed and BestEffort pods do not count", []*corev1.Pod{
			pod(nil, ctr("a", nil, res("cpu", "4", "memory", "1Gi"))),
			pod(nil, ctr("a", nil, nil)),
			pod(nil, ctr("a", res("cpu", "1"), nil)),
		}, 1024},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, be := QOSShares(tt.pods)
			if b != tt.wantBurstable || be != 2 {
				t.Fatalf("QOSShares = %d, %d; want %d, 2", b, be, tt.wantBurstable)
			}
		})
	}
}

func TestKubepodsResources(t *testing.T) {
	tests := []struct {
		name                string
		capacity, sys, kube corev1.ResourceList
		v2                  bool
		want                ResourceConfig
	}{
		{
			name:     "reservations are subtracted from capacity",
			capacity: res("cpu", "2", "memory", "24Gi", "pid", "4194304"),
			sys:      res("cpu", "100m", "memory", "1Gi"),
			kube:     res("cpu", "100m", "memory", "512Mi", "pid", "1000"),
			want:     ResourceConfig{CPUShares: ptrU(1843), Memory: ptrI(24<<30 - 1<<30 - 512<<20), PidsLimit: ptrI(4193304)},
		},
		{
			name:     "a reservation larger than capacity gives zero, not a negative limit",
			capacity: res("memory", "1Gi"),
			sys:      res("memory", "2Gi"),
			want:     ResourceConfig{Memory: ptrI(0)},
		},
		{
			name:     "cgroup v2 gets a weight from the allocatable cpu",
			capacity: res("cpu", "2"),
			v2:       true,
			want:     ResourceConfig{CPUWeight: ptrU(CPUWeight(2048))},
		},
		{
			name: "empty capacity sets nothing",
			want: ResourceConfig{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := KubepodsResources(tt.capacity, tt.sys, tt.kube, tt.v2)
			if g, w := show(got), show(tt.want); g != w {
				t.Fatalf("KubepodsResources = %s, want %s", g, w)
			}
		})
	}
}

func sidecar(c corev1.Container) corev1.Container {
	always := corev1.ContainerRestartPolicyAlways
	c.RestartPolicy = &always
	return c
}
