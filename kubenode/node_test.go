package kubenode

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

type runtimeObject = runtime.Object

var errUnavailable = apierrors.NewServiceUnavailable("the API server is starting")

func testConfig(c *fake.Clientset, clk *clocktesting.FakeClock, h *atomic.Pointer[Health]) Config {
	return Config{
		Client: c, Name: "node-a", Clock: clk,
		Labels:      map[string]string{"tier": "dense", "node.kubernetes.io/pool": "dense"},
		Taints:      []corev1.Taint{{Key: "dedicated", Value: "guarded", Effect: corev1.TaintEffectNoSchedule}},
		Addresses:   []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.5"}, {Type: corev1.NodeHostName, Address: "node-a"}},
		Capacity:    corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")},
		Allocatable: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("7Gi"), corev1.ResourcePods: resource.MustParse("110")},
		Info:        corev1.NodeSystemInfo{ContainerRuntimeVersion: "containerd://1.6.20", OperatingSystem: "linux"},
		Health:      func(context.Context) Health { return *h.Load() },
	}
}

func condition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func patches(c *fake.Clientset) int {
	n := 0
	for _, a := range c.Actions() {
		if a.GetVerb() == "patch" && a.GetResource().Resource == "nodes" {
			n++
		}
	}
	return n
}

func TestRegisterCreatesTheNodeAsTheKubelet(t *testing.T) {
	c := fake.NewClientset()
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC))
	var h atomic.Pointer[Health]
	h.Store(&Health{NotReady: []string{"container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:no config"}})
	a, err := New(testConfig(c, clk, &h))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Register(context.Background()); err != nil {
		t.Fatal(err)
	}
	n, err := c.CoreV1().Nodes().Get(context.Background(), "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{corev1.LabelHostname: "node-a", corev1.LabelOSStable: "linux", "tier": "dense", "node.kubernetes.io/pool": "dense"} {
		if got, ok := n.Labels[k]; !ok || got != v {
			t.Errorf("label %s = %q (set %v), want %q", k, got, ok, v)
		}
	}
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != "dedicated" {
		t.Errorf("taints %v, want the registered one", n.Spec.Taints)
	}
	if got := n.Status.Allocatable[corev1.ResourceMemory]; got.String() != "7Gi" {
		t.Errorf("allocatable memory %s", got.String())
	}
	if n.Status.DaemonEndpoints.KubeletEndpoint.Port != DefaultPort {
		t.Errorf("daemon port %d", n.Status.DaemonEndpoints.KubeletEndpoint.Port)
	}
	r := condition(n, corev1.NodeReady)
	if r == nil || r.Status != corev1.ConditionFalse || r.Reason != "KubeletNotReady" || !strings.Contains(r.Message, "NetworkReady=false") {
		t.Fatalf("Ready condition %+v", r)
	}
	mp := condition(n, corev1.NodeMemoryPressure)
	if mp == nil || mp.Status != corev1.ConditionFalse || mp.Reason != "KubeletHasSufficientMemory" || mp.Message != "kubelet has sufficient memory available" {
		t.Fatalf("MemoryPressure condition %+v", mp)
	}

	// Registered again (a restart): the Node exists; the default labels
	// are put right, the cluster's own changes are kept.
	n.Labels[corev1.LabelHostname] = "wrong"
	n.Labels["added-by-admin"] = "yes"
	if _, err := c.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	a2, err := New(testConfig(c, clk, &h))
	if err != nil {
		t.Fatal(err)
	}
	if err := a2.Register(context.Background()); err != nil {
		t.Fatal(err)
	}
	n, _ = c.CoreV1().Nodes().Get(context.Background(), "node-a", metav1.GetOptions{})
	if n.Labels[corev1.LabelHostname] != "node-a" || n.Labels["added-by-admin"] != "yes" {
		t.Errorf("labels after re-registering: %v", n.Labels)
	}
}

func TestStatusIsPatchedWhenItChangesAndEveryReportInterval(t *testing.T) {
	c := fake.NewClientset()
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC))
	var h atomic.Pointer[Health]
	h.Store(&Health{})
	a, err := New(testConfig(c, clk, &h))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := a.Register(ctx); err != nil {
		t.Fatal(err)
	}
	created, _ := c.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	readySince := condition(created, corev1.NodeReady).LastTransitionTime

	// Nothing changed: no patch.
	clk.Step(10 * time.Second)
	if err := a.update(ctx); err != nil {
		t.Fatal(err)
	}
	if p := patches(c); p != 0 {
		t.Fatalf("%d patches with nothing changed", p)
	}
	// MemoryPressure: patched at once, its transition time moves, Ready's not.
	h.Store(&Health{MemoryPressure: true})
	clk.Step(10 * time.Second)
	if err := a.update(ctx); err != nil {
		t.Fatal(err)
	}
	if p := patches(c); p != 1 {
		t.Fatalf("%d patches after MemoryPressure, want 1", p)
	}
	n, _ := c.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	mp := condition(n, corev1.NodeMemoryPressure)
	if mp.Status != corev1.ConditionTrue || mp.Reason != "KubeletHasInsufficientMemory" || !mp.LastTransitionTime.Time.Equal(clk.Now().Truncate(time.Second)) {
		t.Fatalf("MemoryPressure %+v at %v", mp, clk.Now())
	}
	if r := condition(n, corev1.NodeReady); !r.LastTransitionTime.Equal(&readySince) {
		t.Errorf("Ready's transition time moved: %v -> %v", readySince, r.LastTransitionTime)
	}
	// Steady: reported again only after ReportEvery.
	for range 30 {
		clk.Step(10 * time.Second)
		if err := a.update(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if p := patches(c); p != 2 {
		t.Fatalf("%d patches after 5 min steady, want 2 (the change and one report)", p)
	}
}

func TestCheckLabelsRefusesWhatNodeRestrictionRefuses(t *testing.T) {
	for _, ok := range []map[string]string{
		{"tier": "a"}, {"example.com/x": "y"}, {"node.kubernetes.io/pool": "dense"},
		{"topology.kubernetes.io/zone": "z1"}, {"kubelet.kubernetes.io/x": "y"},
	} {
		if err := CheckLabels(ok); err != nil {
			t.Errorf("%v refused: %v", ok, err)
		}
	}
	err := CheckLabels(map[string]string{"node-role.kubernetes.io/worker": "", "kubernetes.io/role": "master", "node-restriction.kubernetes.io/x": "y"})
	if err == nil || !strings.Contains(err.Error(), "kubernetes.io/role") {
		t.Fatalf("reserved labels: %v", err)
	}
}

func TestRegisterRetriesUntilTheAPIServerAnswers(t *testing.T) {
	c := fake.NewClientset()
	var fails atomic.Int32
	c.PrependReactor("create", "nodes", func(k8stesting.Action) (bool, runtimeObject, error) {
		if fails.Add(1) <= 3 {
			return true, nil, errUnavailable
		}
		return false, nil, nil
	})
	var h atomic.Pointer[Health]
	h.Store(&Health{})
	cfg := testConfig(c, nil, &h)
	cfg.Clock = nil // real time: the back-off is 100, 200, 400 ms
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Register(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fails.Load(); got != 4 {
		t.Errorf("%d creates, want 4", got)
	}
}
