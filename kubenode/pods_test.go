package kubenode

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
)

// fakePods records what the source asks of the pod lifecycle.
type fakePods struct {
	mu         sync.Mutex
	pods       map[types.UID]*corev1.Pod
	terminated map[types.UID]time.Duration
	refuse     map[string]error
}

func (f *fakePods) Apply(_ context.Context, pods []*corev1.Pod, source string) ([]*corev1.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range pods {
		if err := f.refuse[p.Name]; err != nil {
			return nil, err
		}
		p = p.DeepCopy()
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[annotationSource] = source
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.88.0.7",
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		f.pods[p.UID] = p
	}
	return pods, nil
}

func (f *fakePods) List() []*corev1.Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*corev1.Pod
	for _, p := range f.pods {
		out = append(out, p.DeepCopy())
	}
	return out
}

func (f *fakePods) Forget(string, map[types.UID]bool) {}

func (f *fakePods) Terminate(uid types.UID, grace time.Duration) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.pods[uid]; !ok {
		return false
	}
	f.terminated[uid] = grace
	return true
}

func apiPod(name, uid string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(uid), CreationTimestamp: metav1.Now()},
		Spec:   corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, Reason: "by-scheduler"}}}}
}

func waitCond(t *testing.T, what string, f func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if f() {
			return
		}
	}
	t.Fatalf("no %s within 10 s", what)
}

func TestPodSourceRunsRejectsAndTerminatesTheNodesPods(t *testing.T) {
	run, big := apiPod("run", "u-run"), apiPod("big", "u-big")
	c := fake.NewClientset(run, big)
	fp := &fakePods{pods: map[types.UID]*corev1.Pod{}, terminated: map[types.UID]time.Duration{},
		refuse: map[string]error{"big": errors.New("no room")}}
	rec := record.NewFakeRecorder(10)
	s := NewPodSource(PodsConfig{Client: c, NodeName: "node-a", HostIPs: []string{"192.0.2.10"}, Pods: fp, Recorder: rec,
		Reject: func(error) (string, string) { return "OutOfmemory", "Node didn't have enough resource: memory" }, StatusEvery: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	<-s.Synced()

	get := func(name string) *corev1.Pod {
		p, err := c.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	waitCond(t, "run's status written", func() bool { return get("run").Status.Phase == corev1.PodRunning })
	p := get("run")
	if p.Status.PodIP != "10.88.0.7" || p.Status.HostIP != "192.0.2.10" {
		t.Errorf("podIP %q hostIP %q", p.Status.PodIP, p.Status.HostIP)
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Reason != "by-scheduler" {
			t.Errorf("the scheduler's PodScheduled was replaced: %+v", cond)
		}
	}
	waitCond(t, "big rejected", func() bool { return get("big").Status.Reason == "OutOfmemory" })
	if b := get("big"); b.Status.Phase != corev1.PodFailed {
		t.Errorf("rejected pod's phase %s", b.Status.Phase)
	}
	select {
	case e := <-rec.Events:
		if e != "Warning OutOfmemory Node didn't have enough resource: memory" {
			t.Errorf("event %q", e)
		}
	case <-time.After(5 * time.Second):
		t.Error("no event for the rejected pod")
	}

	// A deletion with a grace period terminates the pod within it; once
	// removed, its final status is written and it is deleted.
	p = get("run")
	now := metav1.Now()
	grace := int64(7)
	p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &now, &grace
	if _, err := c.CoreV1().Pods("default").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCond(t, "run terminated", func() bool {
		fp.mu.Lock()
		defer fp.mu.Unlock()
		return fp.terminated["u-run"] == 7*time.Second
	})
	final := fp.List()[0]
	final.Status.Phase = corev1.PodSucceeded
	s.Removed(final)
	waitCond(t, "run deleted from the API", func() bool {
		_, err := c.CoreV1().Pods("default").Get(ctx, "run", metav1.GetOptions{})
		return err != nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestMergeKeepsTheStatusManagersRules(t *testing.T) {
	s := NewPodSource(PodsConfig{HostIPs: []string{"192.0.2.10"}})
	past := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	api := apiPod("p", "u")
	api.Status.Phase = corev1.PodFailed
	api.Status.Reason = "Evicted"
	api.Status.StartTime = &past
	api.Status.Conditions = append(api.Status.Conditions,
		corev1.PodCondition{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: past},
		corev1.PodCondition{Type: "example.com/gate", Status: corev1.ConditionTrue})
	cur := &corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &metav1.Time{Time: time.Now()},
		Conditions: []corev1.PodCondition{{Type: corev1.PodInitialized, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionFalse}}}
	st := s.merge(api, cur)
	if st.Phase != corev1.PodFailed || st.Reason != "Evicted" {
		t.Errorf("phase %s reason %s: a terminal phase was left", st.Phase, st.Reason)
	}
	if !st.StartTime.Equal(&past) {
		t.Errorf("startTime %v, want the API's %v", st.StartTime, past)
	}
	types := map[corev1.PodConditionType]corev1.PodCondition{}
	for _, c := range st.Conditions {
		types[c.Type] = c
	}
	if c := types[corev1.PodInitialized]; !c.LastTransitionTime.Equal(&past) {
		t.Errorf("Initialized transition %v, want kept %v", c.LastTransitionTime, past)
	}
	if _, ok := types["example.com/gate"]; !ok {
		t.Error("a readiness gate's condition was dropped")
	}
	if c, ok := types[corev1.DisruptionTarget]; !ok || c.Reason != "TerminationByKubelet" {
		t.Errorf("DisruptionTarget %+v on an evicted pod", c)
	}
	if st.HostIP != "192.0.2.10" {
		t.Errorf("hostIP %q", st.HostIP)
	}
}

func TestMergeHoldsTheTerminalPhaseWhileAContainerRuns(t *testing.T) {
	s := NewPodSource(PodsConfig{})
	api := apiPod("p", "u")
	api.Status.Phase = corev1.PodRunning
	api.Status.Conditions = append(api.Status.Conditions,
		corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionFalse, Reason: "PreemptionByScheduler"})
	msg := "The node was low on resource: memory. Threshold quantity: 100Mi, available: 80Mi."
	ready := []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}, {Type: corev1.ContainersReady, Status: corev1.ConditionTrue}}
	cur := &corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: msg, Conditions: ready,
		ContainerStatuses: []corev1.ContainerStatus{{Name: "c", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}
	conds := func(st *corev1.PodStatus) map[corev1.PodConditionType]corev1.PodCondition {
		m := map[corev1.PodConditionType]corev1.PodCondition{}
		for _, c := range st.Conditions {
			if _, dup := m[c.Type]; dup {
				t.Errorf("condition %s twice", c.Type)
			}
			m[c.Type] = c
		}
		return m
	}
	// Soft eviction: the containers run out their grace period. The pod
	// stays Running for the API meanwhile, already marked as disrupted.
	st := s.merge(api, cur)
	if st.Phase != corev1.PodRunning || st.Reason != "" {
		t.Errorf("phase %s reason %q while a container runs, want Running", st.Phase, st.Reason)
	}
	if c := conds(st)[corev1.DisruptionTarget]; c.Status != corev1.ConditionTrue || c.Reason != "TerminationByKubelet" || c.Message != msg {
		t.Errorf("DisruptionTarget %+v while the evicted pod stops", c)
	}
	// Stopped: Failed, Evicted, and no longer Ready.
	cur.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error"}}
	st = s.merge(api, cur)
	if st.Phase != corev1.PodFailed || st.Reason != "Evicted" || st.Message != msg {
		t.Errorf("phase %s reason %q message %q once stopped", st.Phase, st.Reason, st.Message)
	}
	for _, ty := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady} {
		if c := conds(st)[ty]; c.Status != corev1.ConditionFalse {
			t.Errorf("%s %+v on a Failed pod", ty, c)
		}
	}
	// Another component's DisruptionTarget is kept on a pod not evicted.
	cur = &corev1.PodStatus{Phase: corev1.PodRunning, Conditions: ready}
	if c := conds(s.merge(api, cur))[corev1.DisruptionTarget]; c.Reason != "PreemptionByScheduler" {
		t.Errorf("the scheduler's DisruptionTarget became %+v", c)
	}
}

func TestMirrorPodsFollowTheStaticPods(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "node-uid"}}
	c := fake.NewClientset(node)
	static := apiPod("web", "static-uid")
	static.Spec.NodeName = ""
	static.Labels = map[string]string{"app": "web"}
	static.Annotations = map[string]string{annotationSource: "file:/etc/nodeguard/manifests/web.yaml"}
	static.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.88.0.9"}
	fp := &fakePods{pods: map[types.UID]*corev1.Pod{static.UID: static}, terminated: map[types.UID]time.Duration{}}
	s := NewPodSource(PodsConfig{Client: c, NodeName: "node-a", Pods: fp, StatusEvery: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	<-s.Synced()
	mirror := func() *corev1.Pod {
		p, err := c.CoreV1().Pods("default").Get(ctx, "web-node-a", metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return p
	}
	waitCond(t, "the mirror pod with the static pod's status", func() bool {
		m := mirror()
		return m != nil && m.Status.PodIP == "10.88.0.9"
	})
	m := mirror()
	if m.Annotations[corev1.MirrorPodAnnotationKey] != "static-uid" || m.Annotations[annotationSource] != "" || m.Spec.NodeName != "node-a" || m.Labels["app"] != "web" {
		t.Errorf("mirror annotations %v, nodeName %q, labels %v", m.Annotations, m.Spec.NodeName, m.Labels)
	}
	if o := m.OwnerReferences; len(o) != 1 || o[0].Kind != "Node" || o[0].UID != "node-uid" || o[0].Controller == nil || !*o[0].Controller {
		t.Errorf("mirror owners %+v, want the Node as controller", o)
	}
	fp.mu.Lock()
	applied := len(fp.pods)
	fp.mu.Unlock()
	if applied != 1 {
		t.Errorf("%d pods in the lifecycle: the mirror was run", applied)
	}

	// Deleted by someone: created again.
	now := metav1.Now()
	m.DeletionTimestamp = &now
	if _, err := c.CoreV1().Pods("default").Update(ctx, m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCond(t, "the mirror created again", func() bool {
		m := mirror()
		return m != nil && m.DeletionTimestamp == nil
	})

	// The manifest edited: the old pod stops beside its successor, whose
	// mirror replaces the old one and stays.
	next := static.DeepCopy()
	next.UID = "static-uid-2"
	fp.mu.Lock()
	fp.pods[static.UID].DeletionTimestamp = &now
	fp.pods[next.UID] = next
	fp.mu.Unlock()
	waitCond(t, "the mirror of the new static pod", func() bool {
		m := mirror()
		return m != nil && m.Annotations[corev1.MirrorPodAnnotationKey] == "static-uid-2"
	})
	for range 10 {
		time.Sleep(30 * time.Millisecond)
		if m := mirror(); m == nil || m.Annotations[corev1.MirrorPodAnnotationKey] != "static-uid-2" {
			t.Fatalf("the mirror flapped while the old static pod stops: %v", m)
		}
	}

	// The manifest removed: the mirror goes.
	fp.mu.Lock()
	delete(fp.pods, static.UID)
	delete(fp.pods, next.UID)
	fp.mu.Unlock()
	s.Removed(next)
	waitCond(t, "the mirror deleted", func() bool { return mirror() == nil })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A readiness gate holds Ready False, with the kubelet's reason and
// message, until its controller sets its condition True in the API; the
// containers' readiness (ContainersReady) is reported as it is.
func TestMergeHoldsReadyForTheReadinessGates(t *testing.T) {
	s := NewPodSource(PodsConfig{})
	api := apiPod("p", "u")
	api.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/lb"}, {ConditionType: "example.com/dns"}}
	api.Status.Phase = corev1.PodRunning
	cur := &corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
		{Type: corev1.PodReady, Status: corev1.ConditionTrue}, {Type: corev1.ContainersReady, Status: corev1.ConditionTrue}}}
	cond := func(st *corev1.PodStatus, ty corev1.PodConditionType) corev1.PodCondition {
		for _, c := range st.Conditions {
			if c.Type == ty {
				return c
			}
		}
		return corev1.PodCondition{}
	}
	st := s.merge(api, cur)
	r := cond(st, corev1.PodReady)
	want := `corresponding condition of pod readiness gate "example.com/lb" does not exist., corresponding condition of pod readiness gate "example.com/dns" does not exist.`
	if r.Status != corev1.ConditionFalse || r.Reason != ReasonReadinessGatesNotReady || r.Message != want {
		t.Errorf("Ready with no gate condition: %+v", r)
	}
	if c := cond(st, corev1.ContainersReady); c.Status != corev1.ConditionTrue {
		t.Errorf("ContainersReady %+v, want True", c)
	}
	api.Status.Conditions = append(api.Status.Conditions,
		corev1.PodCondition{Type: "example.com/lb", Status: corev1.ConditionTrue},
		corev1.PodCondition{Type: "example.com/dns", Status: corev1.ConditionFalse})
	st = s.merge(api, cur)
	if r := cond(st, corev1.PodReady); r.Status != corev1.ConditionFalse || r.Message != `the status of pod readiness gate "example.com/dns" is not "True", but False` {
		t.Errorf("Ready with one gate False: %+v", r)
	}
	if c := cond(st, "example.com/dns"); c.Status != corev1.ConditionFalse {
		t.Errorf("the gate's own condition was not kept: %+v", st.Conditions)
	}
	api.Status.Conditions[len(api.Status.Conditions)-1].Status = corev1.ConditionTrue
	if r := cond(s.merge(api, cur), corev1.PodReady); r.Status != corev1.ConditionTrue {
		t.Errorf("Ready with every gate True: %+v", r)
	}
}
