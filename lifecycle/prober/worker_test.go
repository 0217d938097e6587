package prober

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// fakeProber returns the results it is given, one a probe, and counts.
type fakeProber struct {
	results []Result
	err     error
	msg     string
	calls   int
}

func (f *fakeProber) Probe(context.Context, *corev1.Probe, Target) (Result, string, error) {
	f.calls++
	if f.err != nil {
		return Unknown, "", f.err
	}
	r := f.results[0]
	if len(f.results) > 1 {
		f.results = f.results[1:]
	}
	return r, f.msg, nil
}

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func testPod(c corev1.Container) *corev1.Pod {
	return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}
}

func probe(initialDelay, failure, success int32) *corev1.Probe {
	return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}},
		InitialDelaySeconds: initialDelay, FailureThreshold: failure, SuccessThreshold: success, PeriodSeconds: 1}
}

// setup makes a Manager (with no running workers) and the workers of pod's
// first container, by kind.
func setup(t *testing.T, pod *corev1.Pod, p Prober) (*Manager, *fakeClock, map[Kind]*worker, *[]Update) {
	t.Helper()
	pod.UID, pod.Name, pod.Namespace = types.UID("uid-1"), "p", "ns"
	clk := &fakeClock{t: time.Unix(1000, 0)}
	var updates []Update
	m := NewManager(Config{Prober: p, Now: clk.now, OnUpdate: func(u Update) { updates = append(updates, u) }})
	ws := map[Kind]*worker{}
	c := &pod.Spec.Containers[0]
	for _, k := range []Kind{Startup, Liveness, Readiness} {
		if k.spec(c) != nil {
			ws[k] = newWorker(m, pod, c, k)
			m.probed[ws[k].key] = ws[k]
		}
	}
	m.SetContainer(pod.UID, c.Name, Container{ID: "c1", Running: true, StartedAt: clk.t, PodIP: "10.0.0.2"})
	return m, clk, ws, &updates
}

func TestWorker(t *testing.T) {
	ctx := context.Background()
	t.Run("readiness is false until the first success", func(t *testing.T) {
		fp := &fakeProber{results: []Result{Success}}
		pod := testPod(corev1.Container{Name: "a", ReadinessProbe: probe(5, 3, 1)})
		m, clk, ws, _ := setup(t, pod, fp)
		w := ws[Readiness]
		w.doProbe(ctx)
		if fp.calls != 0 {
			t.Fatalf("probed %d times before initialDelaySeconds", fp.calls)
		}
		if m.Ready(pod.UID, "a", "c1", true) {
			t.Fatal("ready before any probe")
		}
		clk.t = clk.t.Add(5 * time.Second)
		w.doProbe(ctx)
		if fp.calls != 1 || !m.Ready(pod.UID, "a", "c1", true) {
			t.Fatalf("after one success at the initial delay: calls %d, ready %v", fp.calls, m.Ready(pod.UID, "a", "c1", true))
		}
	})
	t.Run("an adopted container keeps the readiness and start its published status gave it until its probes count otherwise", func(t *testing.T) {
		fp := &fakeProber{results: []Result{Failure}}
		pod := testPod(corev1.Container{Name: "a", StartupProbe: probe(0, 1, 1), ReadinessProbe: probe(0, 3, 1)})
		m, clk, ws, updates := setup(t, pod, fp)
		if m.Ready(pod.UID, "a", "c1", true) {
			t.Fatal("ready with nothing published")
		}
		m.SetContainer(pod.UID, "a", Container{ID: "c1", Running: true, StartedAt: clk.t, WasReady: true, WasStarted: true})
		if !m.Started(pod.UID, "a", "c1") || !m.Ready(pod.UID, "a", "c1", true) {
			t.Fatalf("published ready and started, before any probe: started %v ready %v",
				m.Started(pod.UID, "a", "c1"), m.Ready(pod.UID, "a", "c1", true))
		}
		// The workers' first look at the container keeps what was carried.
		ws[Startup].doProbe(ctx)
		ws[Readiness].doProbe(ctx)
		ws[Readiness].doProbe(ctx)
		if fp.calls != 2 || !m.Ready(pod.UID, "a", "c1", true) {
			t.Fatalf("after 2 failures of threshold 3: calls %d, ready %v", fp.calls, m.Ready(pod.UID, "a", "c1", true))
		}
		ws[Readiness].doProbe(ctx)
		if m.Ready(pod.UID, "a", "c1", true) {
			t.Fatal("still ready after failureThreshold failures")
		}
		// A replacement container starts over, whatever the old one's status said.
		m.SetContainer(pod.UID, "a", Container{ID: "c2", Running: true, StartedAt: clk.t})
		ws[Readiness].doProbe(ctx)
		if m.Ready(pod.UID, "a", "c2", true) || m.Started(pod.UID, "a", "c2") {
			t.Fatal("a new container is ready or started before its probes")
		}
		if len(*updates) == 0 {
			t.Fatal("no updates reported for the carried results")
		}
	})
	t.Run("the carry and the worker's first look race without losing the carry", func(t *testing.T) {
		for i := 0; i < 200; i++ {
			fp := &fakeProber{results: []Result{Failure}}
			pod := testPod(corev1.Container{Name: "a", ReadinessProbe: probe(0, 3, 1)})
			m, clk, ws, _ := setup(t, pod, fp)
			done := make(chan struct{})
			go func() {
				defer close(done)
				// Its first look, at c1 or at the adopted c2: one Failure of 3.
				ws[Readiness].doProbe(ctx)
			}()
			m.SetContainer(pod.UID, "a", Container{ID: "c2", Running: true, StartedAt: clk.t, WasReady: true})
			<-done
			if !m.Ready(pod.UID, "a", "c2", true) {
				t.Fatalf("iteration %d: the carried readiness was lost to the worker's first look", i)
			}
		}
	})
	t.Run("readiness is carried only with a start", func(t *testing.T) {
		fp := &fakeProber{results: []Result{Failure}}
		pod := testPod(corev1.Container{Name: "a", StartupProbe: probe(0, 1, 1), ReadinessProbe: probe(0, 3, 1)})
		m, clk, _, _ := setup(t, pod, fp)
		m.SetContainer(pod.UID, "a", Container{ID: "c1", Running: true, StartedAt: clk.t, WasReady: true})
		if _, ok := m.Result(pod.UID, "a", "c1", Readiness); ok {
			t.Fatal("readiness carried for a container whose start was not")
		}
		m.SetContainer(pod.UID, "a", Container{ID: "c1", Running: false, StartedAt: clk.t, WasReady: true, WasStarted: true})
		if m.Started(pod.UID, "a", "c1") {
			t.Fatal("a start carried for a container that is not running")
		}
	})
	t.Run("failures count only at failureThreshold", func(t *testing.T) {
		fp := &fakeProber{results: []Result{Success, Failure, Failure, Success, Failure, Failure, Failure}}
		pod := testPod(corev1.Container{Name: "a", ReadinessProbe: probe(0, 3, 1)})
		m, _, ws, _ := setup(t, pod, fp)
		want := []bool{true, true, true, true, true, true, false}
		for i, w := range want {
			ws[Readiness].doProbe(ctx)
			if got := m.Ready(pod.UID, "a", "c1", true); got != w {
				t.Fatalf("probe %d: ready %v, want %v", i+1, got, w)
			}
		}
	})
	t.Run("successes count only at successThreshold", func(t *testing.T) {
		fp := &fakeProber{results: []Result{Success, Failure, Success, Success}}
		pod := testPod(corev1.Container{Name: "a", ReadinessProbe: probe(0, 1, 2)})
		m, _, ws, _ := setup(t, pod, fp)
		want := []bool{false, false, false, true}
		for i, w := range want {
			ws[Readiness].doProbe(ctx)
			if got := m.Ready(pod.UID, "a", "c1", true); got != w {
				t.Fatalf("probe %d: ready %v, want %v", i+1, got, w)
			}
		}
	})
	t.Run("startup gates liveness and readiness", func(t *testing.T) {
		sp := &fakeProber{results: []Result{Failure, Success}}
		pod := testPod(corev1.Container{Name: "a", StartupProbe: probe(0, 5, 1), LivenessProbe: probe(0, 1, 1), ReadinessProbe: probe(0, 1, 1)})
		m, _, ws, _ := setup(t, pod, sp)
		lp := &fakeProber{results: []Result{Success}}
		// The startup probe runs through sp, the others through lp.
		ws[Startup].doProbe(ctx) // Failure (threshold 5: not counted)
		m.cfg.Prober = lp
		ws[Liveness].doProbe(ctx)
		ws[Readiness].doProbe(ctx)
		if lp.calls != 0 {
			t.Fatalf("liveness or readiness probed %d times before startup succeeded", lp.calls)
		}
		if m.Started(pod.UID, "a", "c1") || m.Ready(pod.UID, "a", "c1", true) {
			t.Fatal("started or ready before the startup probe succeeded")
		}
		m.cfg.Prober = sp
		ws[Startup].doProbe(ctx) // Success
		if !m.Started(pod.UID, "a", "c1") {
			t.Fatal("not started after the startup probe succeeded")
		}
		ws[Startup].doProbe(ctx)
		if sp.calls != 2 {
			t.Fatalf("startup probed %d times, want 2: it stops once started", sp.calls)
		}
		m.cfg.Prober = lp
		ws[Liveness].doProbe(ctx)
		ws[Readiness].doProbe(ctx)
		if lp.calls != 2 || !m.Ready(pod.UID, "a", "c1", true) {
			t.Fatalf("after start: %d probes, ready %v", lp.calls, m.Ready(pod.UID, "a", "c1", true))
		}
	})
	t.Run("a liveness failure is reported once and held until the container is replaced", func(t *testing.T) {
		fp := &fakeProber{results: []Result{Failure}}
		pod := testPod(corev1.Container{Name: "a", LivenessProbe: probe(0, 2, 1)})
		m, clk, ws, updates := setup(t, pod, fp)
		for range 4 {
			ws[Liveness].doProbe(ctx)
		}
		if fp.calls != 2 {
			t.Fatalf("probed %d times, want 2 (then on hold)", fp.calls)
		}
		r, ok := m.Result(pod.UID, "a", "c1", Liveness)
		if !ok || r != Failure {
			t.Fatalf("liveness result %v %v, want Failure", r, ok)
		}
		var fails int
		for _, u := range *updates {
			if u.Kind == Liveness && u.Result == Failure {
				fails++
			}
		}
		if fails != 1 {
			t.Fatalf("%d liveness failure updates, want 1: %+v", fails, *updates)
		}
		m.SetContainer(pod.UID, "a", Container{ID: "c2", Running: true, StartedAt: clk.t})
		fp.results = []Result{Success}
		ws[Liveness].doProbe(ctx)
		if r, _ := m.Result(pod.UID, "a", "c2", Liveness); r != Success || fp.calls != 3 {
			t.Fatalf("the replacement: result %v after %d calls, want Success after 3", r, fp.calls)
		}
	})
	t.Run("a probe that errors is thrown away and counted unknown", func(t *testing.T) {
		fp := &fakeProber{err: errors.New("runtime down")}
		pod := testPod(corev1.Container{Name: "a", ReadinessProbe: probe(0, 1, 1)})
		m, _, ws, _ := setup(t, pod, fp)
		ws[Readiness].doProbe(ctx)
		if r, _ := m.Result(pod.UID, "a", "c1", Readiness); r != Failure {
			t.Fatalf("result %v, want the initial Failure", r)
		}
		cs := m.Counts()
		if len(cs) != 1 || cs[0].Result != "unknown" || cs[0].ProbeType != "Readiness" || cs[0].Value != 1 {
			t.Fatalf("counts %+v", cs)
		}
	})
	t.Run("every failed or errored run is told, with the kubelet's event message", func(t *testing.T) {
		fp := &fakeProber{results: []Result{Failure, Failure, Success}, msg: `service unhealthy (responded with "NOT_SERVING")`}
		pod := testPod(corev1.Container{Name: "a", ReadinessProbe: probe(0, 3, 1), LivenessProbe: probe(0, 3, 1)})
		m, _, ws, _ := setup(t, pod, fp)
		var got []Event
		m.cfg.OnEvent = func(e Event) { got = append(got, e) }
		for range 3 {
			ws[Readiness].doProbe(ctx)
		}
		fp.err = errors.New("exec: runtime down")
		ws[Liveness].doProbe(ctx)
		want := []Event{
			{Pod: pod, Container: "a", ContainerID: "c1", Kind: Readiness, Reason: ReasonUnhealthy, Message: `Readiness probe failed: service unhealthy (responded with "NOT_SERVING")`},
			{Pod: pod, Container: "a", ContainerID: "c1", Kind: Readiness, Reason: ReasonUnhealthy, Message: `Readiness probe failed: service unhealthy (responded with "NOT_SERVING")`},
			{Pod: pod, Container: "a", ContainerID: "c1", Kind: Liveness, Reason: ReasonUnhealthy, Message: "Liveness probe errored and resulted in unknown state: exec: runtime down"},
		}
		if len(got) != len(want) {
			t.Fatalf("told %d events, want %d (below the threshold too, none for the success): %+v", len(got), len(want), got)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("event %d: %+v, want %+v", i, got[i], want[i])
			}
		}
	})
	t.Run("a warning is a success with a ProbeWarning event", func(t *testing.T) {
		fp := &fakeProber{results: []Result{Warning}, msg: "Probe terminated redirects, Response body: "}
		pod := testPod(corev1.Container{Name: "a", ReadinessProbe: probe(0, 1, 1)})
		m, _, ws, _ := setup(t, pod, fp)
		var got []Event
		m.cfg.OnEvent = func(e Event) { got = append(got, e) }
		ws[Readiness].doProbe(ctx)
		if !m.Ready(pod.UID, "a", "c1", true) {
			t.Fatal("not ready after a warning")
		}
		if len(got) != 1 || got[0].Reason != ReasonProbeWarning || got[0].Message != "Readiness probe warning: Probe terminated redirects, Response body: " {
			t.Fatalf("events %+v, want one ProbeWarning", got)
		}
		if cs := m.Counts(); len(cs) != 1 || cs[0].Result != "successful" {
			t.Fatalf("counts %+v, want one successful", cs)
		}
	})
	t.Run("only a changed result is told: steady probes wake nobody", func(t *testing.T) {
		// OnUpdate wakes the pod's worker (lifecycle's onProbe), as a
		// changed result reaches the kubelet's pod worker: a hundred
		// runs of one result are one update, not a hundred syncs.
		fp := &fakeProber{results: []Result{Success}}
		pod := testPod(corev1.Container{Name: "a", ReadinessProbe: probe(0, 3, 1), LivenessProbe: probe(0, 3, 1)})
		_, _, ws, updates := setup(t, pod, fp)
		for range 100 {
			ws[Readiness].doProbe(ctx)
			ws[Liveness].doProbe(ctx)
		}
		// Readiness: its initial Failure, then Success; liveness: its
		// initial Success, which the runs confirm.
		want := []Update{
			{PodUID: pod.UID, Container: "a", ContainerID: "c1", Kind: Readiness, Result: Failure},
			{PodUID: pod.UID, Container: "a", ContainerID: "c1", Kind: Readiness, Result: Success},
			{PodUID: pod.UID, Container: "a", ContainerID: "c1", Kind: Liveness, Result: Success},
		}
		if fp.calls != 200 || len(*updates) != len(want) {
			t.Fatalf("%d probes made %d updates, want 200 probes and %d updates: %+v", fp.calls, len(*updates), len(want), *updates)
		}
		for i, u := range *updates {
			if u != want[i] {
				t.Errorf("update %d: %+v, want %+v", i, u, want[i])
			}
		}
	})
	t.Run("a stopped container is not ready and not probed", func(t *testing.T) {
		fp := &fakeProber{results: []Result{Success}}
		pod := testPod(corev1.Container{Name: "a", ReadinessProbe: probe(0, 1, 1)})
		m, _, ws, _ := setup(t, pod, fp)
		ws[Readiness].doProbe(ctx)
		m.SetContainer(pod.UID, "a", Container{ID: "c1", Running: false})
		ws[Readiness].doProbe(ctx)
		if fp.calls != 1 || m.Ready(pod.UID, "a", "c1", true) {
			t.Fatalf("calls %d, ready %v", fp.calls, m.Ready(pod.UID, "a", "c1", true))
		}
	})
}

// countingProber counts its probes on a channel, for a worker's run.
type countingProber struct{ probes chan struct{} }

func (c countingProber) Probe(context.Context, *corev1.Probe, Target) (Result, string, error) {
	c.probes <- struct{}{}
	return Success, "", nil
}

func TestTriggerProbesAContainerNotProbedYet(t *testing.T) {
	cp := countingProber{probes: make(chan struct{}, 16)}
	m := NewManager(Config{Prober: cp})
	m.start = m.start.Add(-2 * time.Hour) // no first-probe jitter
	pod := testPod(corev1.Container{Name: "a", ReadinessProbe: &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/"}}, PeriodSeconds: 3600}})
	pod.UID = "uid-1"
	ctx, cancel := context.WithCancel(context.Background())
	defer m.Stop()
	defer cancel()
	// The worker's first instant (the next second) finds no container;
	// its next is an hour on.
	m.AddPod(ctx, pod)
	time.Sleep(DefaultGrid + 100*time.Millisecond)
	probed := func(what string) {
		t.Helper()
		select {
		case <-cp.probes:
		case <-time.After(30 * time.Second):
			t.Fatalf("no probe %s", what)
		}
	}
	notProbed := func(what string) {
		t.Helper()
		select {
		case <-cp.probes:
			t.Fatalf("a probe %s", what)
		case <-time.After(200 * time.Millisecond):
		}
	}
	notProbed("before the container was there")
	m.SetContainer(pod.UID, "a", Container{ID: "c1", Running: true, StartedAt: time.Now()})
	m.Trigger(pod.UID, "a", Readiness)
	probed("for a trigger, with the next instant an hour away")
	m.Trigger(pod.UID, "a", Readiness)
	notProbed("for a trigger of a container already probed")
	m.Trigger(pod.UID, "a", Liveness) // no such worker
	m.Trigger("other", "a", Readiness)
	notProbed("for a trigger of a worker that does not exist")
	m.SetContainer(pod.UID, "a", Container{ID: "c2", Running: true, StartedAt: time.Now()})
	m.Trigger(pod.UID, "a", Readiness)
	probed("for a trigger of the container that replaced it")
}
