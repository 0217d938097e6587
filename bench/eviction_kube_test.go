package bench

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

func TestParseKubeletEvent(t *testing.T) {
	now := time.Date(2026, 12, 6, 13, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		line string
		ok   bool
		want KubeletEvent
	}{
		{"the decision to reclaim memory", `I1206 12:59:58.123456    4242 eviction_manager.go:375] "Eviction manager: attempting to reclaim" resourceName="memory"`, true,
			KubeletEvent{Kind: KubeletReclaim, At: time.Date(2026, 12, 6, 12, 59, 58, 123456000, time.UTC), Resource: "memory"}},
		{"a pod evicted", `I1206 12:59:58.523000    4242 eviction_manager.go:658] "Eviction manager: pod is evicted successfully" pod="bench-eviction/hog-200mi-kubelet-1-5d8f-abcde"`, true,
			KubeletEvent{Kind: KubeletEvicted, At: time.Date(2026, 12, 6, 12, 59, 58, 523000000, time.UTC), Pod: "bench-eviction/hog-200mi-kubelet-1-5d8f-abcde"}},
		{"last year's line read on new year's day", `I1231 23:59:59.000001 1 eviction_manager.go:375] "Eviction manager: attempting to reclaim" resourceName="memory"`, true,
			KubeletEvent{Kind: KubeletReclaim, At: time.Date(2025, 12, 31, 23, 59, 59, 1000, time.UTC), Resource: "memory"}},
		{"another eviction manager line", `I1206 12:59:58.123456    4242 eviction_manager.go:418] "Eviction manager: pods ranked for eviction" pods=["a/b"]`, false, KubeletEvent{}},
		{"an eviction without its pod", `I1206 12:59:58.123456    4242 eviction_manager.go:658] "Eviction manager: pod is evicted successfully"`, false, KubeletEvent{}},
		{"not klog", `Started kubelet.service`, false, KubeletEvent{}},
		{"a bad month", `I1306 12:59:58.123456    4242 x.go:1] "Eviction manager: attempting to reclaim" resourceName="memory"`, false, KubeletEvent{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := now
			if tt.name == "last year's line read on new year's day" {
				n = time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC)
			}
			got, ok := ParseKubeletEvent(tt.line, n)
			if ok != tt.ok || got != tt.want {
				t.Errorf("ParseKubeletEvent = %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestParseGuardEviction(t *testing.T) {
	tests := []struct {
		name    string
		line    string
		ok, err bool
		want    GuardEviction
	}{
		{"a decision carried out", `{"time":"2026-12-06T13:00:00.010Z","level":"INFO","msg":"evict pod","signal":"allocatableMemory.available","threshold":"allocatableMemory.available<104857600","observed":1.0e8,"victim":"bench-eviction/hog-x","uid":"u","staleness":2000000,"kill_latency":3000000,"dry_run":false}`,
			true, false, GuardEviction{Victim: "bench-eviction/hog-x", Signal: "allocatableMemory.available", Threshold: "allocatableMemory.available<104857600", Observed: 1e8,
				ObservedAt: time.Date(2026, 12, 6, 13, 0, 0, 5000000, time.UTC), KillSent: time.Date(2026, 12, 6, 13, 0, 0, 10000000, time.UTC)}},
		{"another line", `{"time":"2026-12-06T13:00:00Z","level":"INFO","msg":"guard: pod cgroup killed","pod":"a/b"}`, false, false, GuardEviction{}},
		{"a failed eviction", `{"time":"2026-12-06T13:00:00Z","level":"WARN","msg":"eviction failed, retrying at the next evaluation","victim":"a/b"}`, false, false, GuardEviction{}},
		{"text, not JSON", `time=2026-12-06T13:00:00Z level=INFO msg="evict pod"`, false, false, GuardEviction{}},
		{"a decision without its latencies", `{"time":"2026-12-06T13:00:00Z","level":"INFO","msg":"evict pod","victim":"a/b"}`, false, true, GuardEviction{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, err := ParseGuardEviction(tt.line)
			if (err != nil) != tt.err || ok != tt.ok {
				t.Fatalf("ParseGuardEviction = %+v, %v, %v; want ok %v, error %v", got, ok, err, tt.ok, tt.err)
			}
			if tt.err && !errors.Is(err, ErrMalformedEvent) {
				t.Errorf("error %v does not match ErrMalformedEvent", err)
			}
			if !got.ObservedAt.Equal(tt.want.ObservedAt) || !got.KillSent.Equal(tt.want.KillSent) {
				t.Errorf("times %v, %v; want %v, %v", got.ObservedAt, got.KillSent, tt.want.ObservedAt, tt.want.KillSent)
			}
			got.ObservedAt, got.KillSent, tt.want.ObservedAt, tt.want.KillSent = time.Time{}, time.Time{}, time.Time{}, time.Time{}
			if got != tt.want {
				t.Errorf("ParseGuardEviction = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestExternalKill: the kubelet's eviction has no kill time: it is the
// hog's end as the monitor saw it, whether that came before or after the
// kubelet's line was read; a guard's kill with its own time that came
// earlier wins.
func TestExternalKill(t *testing.T) {
	end := time.Date(2026, 12, 6, 13, 0, 1, 0, time.UTC)
	newState := func() *trialState {
		s := &trialState{r: &evictionRun{cfg: EvictionConfig{Log: slog.New(slog.DiscardHandler)}}, hogKey: "ns/hog", observeEnd: true}
		return s
	}
	t.Run("the end seen first", func(t *testing.T) {
		s := newState()
		s.hogEnd = end
		s.agentEvicted(AgentEviction{Actor: "kubelet", Victim: "ns/hog"})
		if !s.t.KillSent.Equal(end) || !s.externalKill {
			t.Errorf("kill %v external %v, want %v true", s.t.KillSent, s.externalKill, end)
		}
	})
	t.Run("the line read first", func(t *testing.T) {
		s := newState()
		s.agentEvicted(AgentEviction{Actor: "kubelet", Victim: "ns/hog"})
		if !s.t.KillSent.IsZero() || !s.externalKill {
			t.Errorf("kill %v external %v before the end was seen", s.t.KillSent, s.externalKill)
		}
	})
	t.Run("the guard's earlier kill wins and the hog is one victim", func(t *testing.T) {
		s := newState()
		s.hogEnd = end
		s.agentEvicted(AgentEviction{Actor: "kubelet", Victim: "ns/hog"})
		s.agentEvicted(AgentEviction{Actor: "guard", Victim: "ns/hog", KillSent: end.Add(-time.Second)})
		if !s.t.KillSent.Equal(end.Add(-time.Second)) || len(s.t.Victims) != 1 || s.t.Collateral != 0 {
			t.Errorf("kill %v victims %v collateral %d", s.t.KillSent, s.t.Victims, s.t.Collateral)
		}
	})
	t.Run("the earliest detection counts", func(t *testing.T) {
		s := newState()
		s.detected(end)
		s.detected(end.Add(-time.Millisecond))
		s.detected(end.Add(time.Millisecond))
		if !s.t.Detected.Equal(end.Add(-time.Millisecond)) {
			t.Errorf("detected %v", s.t.Detected)
		}
	})
}

func TestKubePods(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	k := &KubePods{Client: cs, Node: "n1", Poll: time.Millisecond}
	bg := DefaultEvictionBackground("busybox", "hog")
	pods, err := k.Apply(ctx, bg[:2], "")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if p.Spec.NodeName != "n1" || !slices.Contains(p.Spec.Tolerations, memoryPressureToleration) || *p.Spec.TerminationGracePeriodSeconds != apiGracePeriod ||
			p.Labels[LabelRace] != "true" || *p.Spec.AutomountServiceAccountToken {
			t.Errorf("pod %s as sent: %+v", p.Name, p.Spec)
		}
	}
	// Another node's pod is not listed.
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "y"}, Spec: corev1.PodSpec{NodeName: "n2"}}
	if _, err := cs.CoreV1().Pods("y").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	l, err := k.List(ctx)
	if err != nil || len(l) != 2 {
		t.Errorf("List: %d pods, %v; want the node's 2", len(l), err)
	}
	if err := k.Delete(ctx, evictionNamespace, "nope"); !isNotFound(err) {
		t.Errorf("Delete of a missing pod: %v, want not found", err)
	}

	hog := hogPodDelay("hog-1", "hog", 1<<20, 1<<20, 1<<30, kubeHogDelay)
	d := k.hogDeployment(hog)
	if *d.Spec.Replicas != 1 || d.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways || d.Spec.Template.Spec.NodeName != "n1" ||
		d.Spec.Template.Labels[LabelHog] != "hog-1" || d.Spec.Selector.MatchLabels[LabelHog] != "hog-1" {
		t.Errorf("hog deployment: %+v", d.Spec)
	}
	// The fake has no ReplicaSet controller: the pod is made here.
	rsPod := func(name, uid string, running bool) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: evictionNamespace, UID: k8stypes.UID("u-" + uid), Labels: d.Spec.Template.Labels}, Spec: d.Spec.Template.Spec}
		if running {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: hogContainer, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
		}
		if _, err := cs.CoreV1().Pods(evictionNamespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rsPod("hog-1-a", "a", true)
	got, err := k.StartHog(ctx, hog, time.Second)
	if err != nil || got.Name != "hog-1-a" {
		t.Fatalf("StartHog = %v, %v", got, err)
	}
	if _, err := k.WaitReplacement(ctx, evictionNamespace, "hog-1", "u-a", 20*time.Millisecond); err == nil {
		t.Error("the hog itself taken for its replacement")
	}
	rsPod("hog-1-b", "b", false)
	if _, err := k.WaitReplacement(ctx, evictionNamespace, "hog-1", "u-a", 20*time.Millisecond); err == nil {
		t.Error("a replacement not running yet taken for one that ran")
	}
	rsPod("hog-1-c", "c", true)
	if _, err := k.WaitReplacement(ctx, evictionNamespace, "hog-1", "u-a", time.Second); err != nil {
		t.Errorf("WaitReplacement: %v", err)
	}
	if err := k.StopHog(ctx, evictionNamespace, "hog-1", time.Second); err != nil {
		t.Errorf("StopHog: %v", err)
	}
	if left, _ := k.HogPods(ctx, evictionNamespace, "hog-1"); len(left) != 0 {
		t.Errorf("%d hog pods left", len(left))
	}
	if err := k.RemoveRace(ctx, evictionNamespace, time.Second); err != nil {
		t.Errorf("RemoveRace: %v", err)
	}
	if l, _ := k.List(ctx); len(l) != 0 {
		t.Errorf("%d pods of the race left", len(l))
	}
}

func TestKubeOwnerGroups(t *testing.T) {
	reg := NewKubeEvictionStrategies(KubeStrategyDeps{})
	order, by, err := KubeOwnerGroups(reg, []string{StrategyNodeguardNode, StrategyKubeletReal, StrategyKubeletGuard})
	if err != nil || !slices.Equal(order, []string{OwnerNodeguard, OwnerKubelet}) ||
		!slices.Equal(by[OwnerKubelet], []string{StrategyKubeletReal, StrategyKubeletGuard}) {
		t.Errorf("KubeOwnerGroups = %v %v %v", order, by, err)
	}
	if _, _, err := KubeOwnerGroups(reg, []string{"psi"}); !errors.Is(err, ErrStrategyNotRegistered) {
		t.Errorf("an unknown strategy: %v", err)
	}
	reg.Register("poll1s", func() EvictionStrategy { return NewPollStrategy("poll1s", time.Second) })
	if _, _, err := KubeOwnerGroups(reg, []string{"poll1s"}); err == nil {
		t.Error("a strategy with no owner accepted")
	}
}
