package lifecycle_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/lifecycle"
)

// sidecarPod has a sidecar (logger, gated by its startupProbe), a plain
// init container that checks the sidecar is up, a second sidecar (proxy,
// with a readinessProbe, which exits 3 when /tmp/crash appears) and an
// app container, in a pod with restartPolicy Never: the sidecars are
// restarted all the same. Every container appends what it does to
// /out/events, a hostPath that outlives the pod. On TERM each waits
// before writing, the longer the earlier it should stop (app 2 s, proxy
// 1 s, logger not at all), so that containers stopped all at once would
// write in the reverse of the order the kubelet stops them in.
const sidecarPod = `
apiVersion: v1
kind: Pod
metadata: {name: sidecars}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 20
  volumes:
  - {name: shared, emptyDir: {}}
  - {name: out, hostPath: {path: OUT, type: DirectoryOrCreate}}
  initContainers:
  - name: logger
    image: BUSYBOX
    restartPolicy: Always
    command: [sh, -c, "trap 'echo stop logger $(read u _ < /proc/uptime; echo $u) >> /out/events; exit 0' TERM; echo start logger >> /out/events; sleep 1; touch /shared/logger-up; while :; do sleep 1 & wait $!; done"]
    volumeMounts: [{name: shared, mountPath: /shared}, {name: out, mountPath: /out}]
    startupProbe: {exec: {command: [test, -f, /shared/logger-up]}, periodSeconds: 1, failureThreshold: 30}
  - name: setup
    image: BUSYBOX
    command: [sh, -c, "test -f /shared/logger-up && echo setup >> /out/events"]
    volumeMounts: [{name: shared, mountPath: /shared}, {name: out, mountPath: /out}]
  - name: proxy
    image: BUSYBOX
    restartPolicy: Always
    command: [sh, -c, "trap 'sleep 1; echo stop proxy $(read u _ < /proc/uptime; echo $u) >> /out/events; exit 0' TERM; echo start proxy >> /out/events; touch /tmp/ready; while [ ! -f /tmp/crash ]; do sleep 1 & wait $!; done; exit 3"]
    volumeMounts: [{name: out, mountPath: /out}]
    readinessProbe: {exec: {command: [test, -f, /tmp/ready]}, periodSeconds: 1, failureThreshold: 1}
  containers:
  - name: app
    image: BUSYBOX
    command: [sh, -c, "trap 'sleep 2; echo stop app $(read u _ < /proc/uptime; echo $u) >> /out/events; exit 0' TERM; echo start app >> /out/events; while :; do sleep 1 & wait $!; done"]
    volumeMounts: [{name: out, mountPath: /out}]
`

// sidecarJobs: restartPolicy Never pods with a sidecar whose app container
// exits 0 (job) or whose plain init container fails (broken), and one
// whose sidecar has a liveness probe (unhealthy).
const sidecarJobs = `
apiVersion: v1
kind: Pod
metadata: {name: unhealthy}
spec:
  terminationGracePeriodSeconds: 5
  initContainers:
  - name: agent
    image: BUSYBOX
    restartPolicy: Always
    command: [sh, -c, "trap 'exit 0' TERM; touch /tmp/alive; while :; do sleep 1 & wait $!; done"]
    livenessProbe: {exec: {command: [test, -f, /tmp/alive]}, periodSeconds: 1, failureThreshold: 1, terminationGracePeriodSeconds: 1}
  containers:
  - name: work
    image: BUSYBOX
    command: [sh, -c, "trap 'exit 0' TERM; while :; do sleep 1 & wait $!; done"]
---
apiVersion: v1
kind: Pod
metadata: {name: job}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 5
  initContainers:
  - name: helper
    image: BUSYBOX
    restartPolicy: Always
    command: [sh, -c, "trap 'exit 0' TERM; while :; do sleep 1 & wait $!; done"]
  containers:
  - name: work
    image: BUSYBOX
    command: [sh, -c, "sleep 1"]
---
apiVersion: v1
kind: Pod
metadata: {name: broken}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 5
  initContainers:
  - name: helper
    image: BUSYBOX
    restartPolicy: Always
    command: [sh, -c, "trap 'exit 0' TERM; while :; do sleep 1 & wait $!; done"]
  - name: migrate
    image: BUSYBOX
    command: [sh, -c, "exit 1"]
  containers:
  - name: work
    image: BUSYBOX
    command: [sleep, "3600"]
`

func initStatus(p *corev1.Pod, name string) corev1.ContainerStatus {
	for _, cs := range p.Status.InitContainerStatuses {
		if cs.Name == name {
			return cs
		}
	}
	return corev1.ContainerStatus{}
}

func started(cs corev1.ContainerStatus) bool {
	return cs.State.Running != nil && cs.Started != nil && *cs.Started
}

// containerLog reads the lines the pod's containers appended, without the
// timestamps.
func containerLog(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for l := range strings.Lines(string(b)) {
		f := strings.Fields(l)
		out = append(out, strings.Join(f[:min(len(f), 2)], " "))
	}
	return out
}

func TestSidecarsInRealContainers(t *testing.T) {
	r := newRig(t)
	m, stop := r.manager(t)
	parent := t
	ctx := context.Background()
	out := filepath.Join(r.hostDir, "sidecars")
	if _, err := m.Apply(ctx, r.pods(t, strings.ReplaceAll(sidecarPod, "OUT", out)), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(out, "events")

	t.Run("init containers and sidecars start in order, and the sidecars keep running next to the app", func(t *testing.T) {
		p := waitPod(t, m, "sidecars", "running and ready with its sidecars", func(p *corev1.Pod) bool {
			return running(p) && ready(p) && started(initStatus(p, "logger")) && started(initStatus(p, "proxy"))
		})
		// The app is Running as soon as its process is: its first line
		// may come a moment later.
		want := []string{"start logger", "setup", "start proxy", "start app"}
		got := containerLog(t, log)
		for deadline := time.Now().Add(10 * time.Second); len(got) < len(want) && time.Now().Before(deadline); got = containerLog(t, log) {
			time.Sleep(50 * time.Millisecond)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("events %q, want %q", got, want)
		}
		if s := initStatus(p, "setup").State.Terminated; s == nil || s.Reason != "Completed" {
			t.Errorf("plain init container: %+v, want terminated Completed", initStatus(p, "setup").State)
		}
		for _, n := range []string{"logger", "proxy"} {
			if cs := initStatus(p, n); !cs.Ready || cs.RestartCount != 0 {
				t.Errorf("sidecar %s: ready %v, restartCount %d; want ready, 0", n, cs.Ready, cs.RestartCount)
			}
		}
		if condition(p, corev1.PodInitialized) != corev1.ConditionTrue {
			t.Errorf("Initialized %s with every init container done or started", condition(p, corev1.PodInitialized))
		}
	})

	t.Run("a sidecar's readiness counts for the pod's Ready", func(t *testing.T) {
		r.exec(t, m, "sidecars", "proxy", "rm", "/tmp/ready")
		p := waitPod(t, m, "sidecars", "unready through its sidecar", func(p *corev1.Pod) bool { return !initStatus(p, "proxy").Ready })
		if condition(p, corev1.PodReady) != corev1.ConditionFalse || condition(p, corev1.ContainersReady) != corev1.ConditionFalse {
			t.Fatalf("sidecar unready, conditions %+v", p.Status.Conditions)
		}
		if !p.Status.ContainerStatuses[0].Ready || p.Status.Phase != corev1.PodRunning {
			t.Fatalf("the app container: ready %v, phase %s", p.Status.ContainerStatuses[0].Ready, p.Status.Phase)
		}
		r.exec(t, m, "sidecars", "proxy", "touch", "/tmp/ready")
		waitPod(t, m, "sidecars", "ready again", ready)
	})

	t.Run("a sidecar that exits is restarted, whatever the pod's restartPolicy, and the app is left alone", func(t *testing.T) {
		before, _ := m.Get("default", "sidecars")
		app := before.Status.ContainerStatuses[0].ContainerID
		r.exec(t, m, "sidecars", "proxy", "touch", "/tmp/crash")
		p := waitPod(t, m, "sidecars", "with its sidecar restarted", func(p *corev1.Pod) bool {
			cs := initStatus(p, "proxy")
			return cs.RestartCount >= 1 && started(cs) && cs.Ready
		})
		// Restarted at once, with no back-off: its last state is the
		// attempt before, as the kubelet reports it.
		if last := initStatus(p, "proxy").LastTerminationState.Terminated; last == nil || last.ExitCode != 3 || last.Reason != "Error" {
			t.Errorf("the restarted sidecar's last state %+v, want terminated with exit code 3, reason Error", initStatus(p, "proxy").LastTerminationState)
		}
		if cs := p.Status.ContainerStatuses[0]; cs.ContainerID != app || cs.RestartCount != 0 || cs.State.Running == nil {
			t.Fatalf("the app container was touched: %s (was %s), restartCount %d, state %+v", cs.ContainerID, app, cs.RestartCount, cs.State)
		}
		if cs := initStatus(p, "logger"); cs.RestartCount != 0 || !started(cs) {
			t.Fatalf("the other sidecar: restartCount %d, state %+v", cs.RestartCount, cs.State)
		}
		if s := initStatus(p, "setup"); s.RestartCount != 0 || s.State.Terminated == nil {
			t.Fatalf("the plain init container ran again: %+v", s)
		}
		if p.Status.Phase != corev1.PodRunning || condition(p, corev1.PodInitialized) != corev1.ConditionTrue {
			t.Fatalf("phase %s, Initialized %s while a sidecar restarts", p.Status.Phase, condition(p, corev1.PodInitialized))
		}
		want := []string{"start logger", "setup", "start proxy", "start app", "start proxy"}
		if got := containerLog(t, log); !slices.Equal(got, want) {
			t.Fatalf("events %q, want %q", got, want)
		}
	})

	t.Run("after a restart of nodeguard the pod is adopted: no init container runs again, no sidecar is duplicated", func(t *testing.T) {
		before, _ := m.Get("default", "sidecars")
		ids := func(p *corev1.Pod) []string {
			var out []string
			for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
				out = append(out, cs.Name+"="+cs.ContainerID)
			}
			return out
		}
		stop()
		m, stop = r.manager(parent) // it outlives this subtest
		// The new Manager's own probes have passed: its status is of its
		// syncs, not left from the first.
		p := waitPod(t, m, "sidecars", "adopted, running and ready", func(p *corev1.Pod) bool {
			return running(p) && ready(p) && started(initStatus(p, "logger")) && started(initStatus(p, "proxy")) &&
				probeCount(m, "sidecars", "Readiness", "successful") > 0 && probeCount(m, "sidecars", "Startup", "successful") > 0
		})
		if got, want := ids(p), ids(before); !slices.Equal(got, want) {
			t.Fatalf("containers after the restart %q, before %q", got, want)
		}
		want := []string{"start logger", "setup", "start proxy", "start app", "start proxy"}
		if got := containerLog(t, log); !slices.Equal(got, want) {
			t.Fatalf("events %q, want %q", got, want)
		}
	})

	t.Run("on deletion the app stops first, then the sidecars in reverse order", func(t *testing.T) {
		start := time.Now()
		if err := m.Delete(ctx, "default", "sidecars"); err != nil {
			t.Fatal(err)
		}
		waitGone(t, m, "sidecars")
		b, _ := os.ReadFile(log)
		t.Logf("deleted in %v; events:\n%s", time.Since(start).Round(10*time.Millisecond), b)
		got := containerLog(t, log)
		want := []string{"stop app", "stop proxy", "stop logger"}
		if len(got) < len(want) || !slices.Equal(got[len(got)-len(want):], want) {
			t.Fatalf("events %q, want them to end in %q", got, want)
		}
	})

	if _, err := m.Apply(ctx, r.pods(t, sidecarJobs), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}

	t.Run("a restartPolicy Never pod whose app exits 0 is Succeeded, its sidecar stopped and not restarted", func(t *testing.T) {
		waitPod(t, m, "job", "Succeeded with its sidecar stopped", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodSucceeded && initStatus(p, "helper").State.Terminated != nil
		})
		// A few syncs later (Resync is 200 ms) it is still so.
		time.Sleep(time.Second)
		p, _ := m.Get("default", "job")
		if cs := initStatus(p, "helper"); p.Status.Phase != corev1.PodSucceeded || cs.State.Terminated == nil || cs.RestartCount != 0 {
			t.Fatalf("phase %s, sidecar state %+v restartCount %d: the sidecar came back", p.Status.Phase, cs.State, cs.RestartCount)
		}
		if condition(p, corev1.PodReady) != corev1.ConditionFalse {
			t.Errorf("a finished pod is Ready")
		}
	})

	t.Run("a restartPolicy Never pod whose init container fails is Failed, its sidecar stopped", func(t *testing.T) {
		p := waitPod(t, m, "broken", "Failed with its sidecar stopped", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodFailed && initStatus(p, "helper").State.Terminated != nil
		})
		if len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].ContainerID != "" {
			t.Fatalf("the app container ran after a failed init: %+v", p.Status.ContainerStatuses[0])
		}
		if condition(p, corev1.PodInitialized) != corev1.ConditionFalse {
			t.Errorf("Initialized %s after a failed init container", condition(p, corev1.PodInitialized))
		}
	})

	t.Run("a sidecar that fails its liveness probe is restarted, the app left alone", func(t *testing.T) {
		waitPod(t, m, "unhealthy", "running with its sidecar", func(p *corev1.Pod) bool {
			return running(p) && started(initStatus(p, "agent"))
		})
		r.exec(t, m, "unhealthy", "agent", "rm", "/tmp/alive")
		p := waitPod(t, m, "unhealthy", "with its sidecar restarted", func(p *corev1.Pod) bool {
			cs := initStatus(p, "agent")
			return cs.RestartCount >= 1 && started(cs)
		})
		if n := probeCount(m, "unhealthy", "Liveness", "failed"); n < 1 {
			t.Fatalf("restarted without a failed liveness probe counted: %+v", m.ProbeCounts())
		}
		if cs := p.Status.ContainerStatuses[0]; cs.RestartCount != 0 || cs.State.Running == nil {
			t.Fatalf("the app container: restartCount %d, state %+v", cs.RestartCount, cs.State)
		}
	})

	for _, n := range []string{"job", "broken", "unhealthy"} {
		if err := m.Delete(ctx, "default", n); err != nil {
			t.Fatal(err)
		}
		waitGone(t, m, n)
	}
}
