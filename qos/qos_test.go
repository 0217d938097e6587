package qos

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// res builds a ResourceList from name/quantity pairs.
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
	p.Name, p.Namespace = "p", "default"
	p.Spec.InitContainers = init
	p.Spec.Containers = app
	return p
}

func always() *corev1.ContainerRestartPolicy {
	a := corev1.ContainerRestartPolicyAlways
	return &a
}

func TestClass(t *testing.T) {
	full := res("cpu", "1", "memory", "1Gi")
	tests := []struct {
		name string
		pod  *corev1.Pod
		want corev1.PodQOSClass
	}{
		{"a pod without requests or limits is BestEffort", pod(nil, ctr("a", nil, nil)), corev1.PodQOSBestEffort},
		{"a pod without containers is BestEffort", pod(nil), corev1.PodQOSBestEffort},
		{"explicit zero quantities count as unset", pod(nil, ctr("a", res("cpu", "0", "memory", "0"), res("cpu", "0"))), corev1.PodQOSBestEffort},
		{"only ephemeral-storage requests leave a pod BestEffort", pod(nil, ctr("a", res("ephemeral-storage", "1Gi"), res("ephemeral-storage", "2Gi"))), corev1.PodQOSBestEffort},
		{"equal cpu and memory requests and limits make a pod Guaranteed", pod(nil, ctr("a", full, full)), corev1.PodQOSGuaranteed},
		{"limits alone make a pod Guaranteed because requests default to limits", pod(nil, ctr("a", nil, full)), corev1.PodQOSGuaranteed},
		{"an explicit zero request under a limit is not replaced by the limit", pod(nil, ctr("a", res("cpu", "0"), full)), corev1.PodQOSBurstable},
		{"differently spelled equal quantities still compare equal", pod(nil, ctr("a", res("cpu", "1000m", "memory", "1024Mi"), full)), corev1.PodQOSGuaranteed},
		{"requests below limits make a pod Burstable", pod(nil, ctr("a", res("cpu", "500m", "memory", "1Gi"), full)), corev1.PodQOSBurstable},
		{"a cpu limit without a memory limit makes a pod Burstable", pod(nil, ctr("a", nil, res("cpu", "1"))), corev1.PodQOSBurstable},
		{"a memory request alone makes a pod Burstable", pod(nil, ctr("a", res("memory", "1Mi"), nil)), corev1.PodQOSBurstable},
		{"ephemeral-storage does not spoil a Guaranteed pod", pod(nil, ctr("a", res("cpu", "1", "memory", "1Gi", "ephemeral-storage", "1Gi"), res("cpu", "1", "memory", "1Gi"))), corev1.PodQOSGuaranteed},
		{"one Guaranteed and one BestEffort container make a Burstable pod", pod(nil, ctr("a", full, full), ctr("b", nil, nil)), corev1.PodQOSBurstable},
		{"all Guaranteed containers make a Guaranteed pod", pod(nil, ctr("a", full, full), ctr("b", nil, res("cpu", "2", "memory", "2Gi"))), corev1.PodQOSGuaranteed},
		{"a BestEffort init container spoils a Guaranteed pod", pod([]corev1.Container{ctr("i", nil, nil)}, ctr("a", full, full)), corev1.PodQOSBurstable},
		{"a Burstable init container makes a BestEffort pod Burstable", pod([]corev1.Container{ctr("i", res("cpu", "1"), nil)}, ctr("a", nil, nil)), corev1.PodQOSBurstable},
		{"Guaranteed init and app containers make a Guaranteed pod", pod([]corev1.Container{ctr("i", full, full)}, ctr("a", full, full)), corev1.PodQOSGuaranteed},
		{"the status class is ignored", func() *corev1.Pod {
			p := pod(nil, ctr("a", nil, nil))
			p.Status.QOSClass = corev1.PodQOSGuaranteed
			return p
		}(), corev1.PodQOSBestEffort},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Class(tt.pod); got != tt.want {
				t.Fatalf("Class = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestPodRequestsAndLimits(t *testing.T) {
	sidecar := ctr("s", res("cpu", "100m", "memory", "100Mi"), res("memory", "100Mi"))
	sidecar.RestartPolicy = always()
	tests := []struct {
		name         string
		pod          *corev1.Pod
		wantRequests corev1.ResourceList
		wantLimits   corev1.ResourceList
	}{
		{
			name:         "app containers add up",
			pod:          pod(nil, ctr("a", res("cpu", "1"), res("memory", "1Gi")), ctr("b", res("cpu", "500m"), nil)),
			wantRequests: res("cpu", "1500m", "memory", "1Gi"),
			wantLimits:   res("memory", "1Gi"),
		},
		{
			name:         "a larger init container wins over the app sum",
			pod:          pod([]corev1.Container{ctr("i", res("cpu", "4"), res("memory", "4Gi"))}, ctr("a", res("cpu", "1"), res("memory", "1Gi"))),
			wantRequests: res("cpu", "4", "memory", "4Gi"),
			wantLimits:   res("memory", "4Gi"),
		},
		{
			name:         "a smaller init container changes nothing",
			pod:          pod([]corev1.Container{ctr("i", res("cpu", "100m"), nil)}, ctr("a", res("cpu", "1"), nil)),
			wantRequests: res("cpu", "1"),
			wantLimits:   corev1.ResourceList{},
		},
		{
			name:         "a sidecar adds to the app sum and to every later init step",
			pod:          pod([]corev1.Container{sidecar, ctr("i", res("cpu", "1"), nil)}, ctr("a", res("cpu", "200m"), nil)),
			wantRequests: res("cpu", "1100m", "memory", "100Mi"),
			wantLimits:   res("memory", "100Mi"),
		},
		{
			name:         "a sidecar after an init container does not add to that init step",
			pod:          pod([]corev1.Container{ctr("i", res("cpu", "1"), nil), sidecar}, ctr("a", res("cpu", "200m"), nil)),
			wantRequests: res("cpu", "1", "memory", "100Mi"),
			wantLimits:   res("memory", "100Mi"),
		},
		{
			name: "two sidecars and an app container add up, a sidecar's limit defaulting its request",
			pod: func() *corev1.Pod {
				limitOnly := ctr("t", nil, res("cpu", "300m", "memory", "50Mi"))
				limitOnly.RestartPolicy = always()
				return pod([]corev1.Container{sidecar, limitOnly}, ctr("a", res("cpu", "200m", "memory", "10Mi"), nil))
			}(),
			wantRequests: res("cpu", "600m", "memory", "160Mi"),
			wantLimits:   res("cpu", "300m", "memory", "150Mi"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assertList(t, "PodRequests", PodRequests(tt.pod), tt.wantRequests)
			assertList(t, "PodLimits", PodLimits(tt.pod), tt.wantLimits)
		})
	}
}

func assertList(t *testing.T, what string, got, want corev1.ResourceList) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
	for name, w := range want {
		if g, ok := got[name]; !ok || g.Cmp(w) != 0 {
			t.Fatalf("%s[%s] = %v, want %v (all: %v)", what, name, got[name], w.String(), got)
		}
	}
}

func TestEffectiveRequestsDoesNotModifyTheContainer(t *testing.T) {
	c := ctr("a", nil, res("cpu", "1"))
	_ = EffectiveRequests(&c)
	if c.Resources.Requests != nil {
		t.Fatalf("requests were modified: %v", c.Resources.Requests)
	}
}

func TestCritical(t *testing.T) {
	prio := func(v int32) *int32 { return &v }
	tests := []struct {
		name             string
		className        string
		priority         *int32
		wantCritical     bool
		wantNodeCritical bool
	}{
		{"a pod without priority is not critical", "", nil, false, false},
		{"a priority just below the threshold is not critical", "", prio(SystemCriticalPriority - 1), false, false},
		{"a priority at the threshold is critical but not node-critical", "", prio(SystemCriticalPriority), true, false},
		{"system-cluster-critical is critical but not node-critical", SystemClusterCritical, nil, true, false},
		{"system-node-critical without a resolved priority is node-critical", SystemNodeCritical, nil, true, true},
		{"system-node-critical with its resolved priority is node-critical", SystemNodeCritical, prio(SystemNodeCriticalPriority), true, true},
		{"a resolved priority wins over the class name", SystemNodeCritical, prio(5), false, false},
		{"an unknown class without a resolved priority is not critical", "high", nil, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := pod(nil, ctr("a", nil, nil))
			p.Spec.PriorityClassName, p.Spec.Priority = tt.className, tt.priority
			if got := IsCritical(p); got != tt.wantCritical {
				t.Errorf("IsCritical = %v, want %v", got, tt.wantCritical)
			}
			if got := IsNodeCritical(p); got != tt.wantNodeCritical {
				t.Errorf("IsNodeCritical = %v, want %v", got, tt.wantNodeCritical)
			}
		})
	}
}

func resourceBytes(v int64) *resource.Quantity { return resource.NewQuantity(v, resource.BinarySI) }
