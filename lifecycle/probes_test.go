package lifecycle_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/prober"
)

const probedPods = `
apiVersion: v1
kind: Pod
metadata: {name: gated}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: BUSYBOX
    command: [sleep, "3600"]
    startupProbe:
      exec: {command: [test, -f, /tmp/started]}
      periodSeconds: 1
      failureThreshold: 1000
    readinessProbe:
      exec: {command: [test, -f, /tmp/ready]}
      periodSeconds: 1
      failureThreshold: 1
---
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: httpd
    image: BUSYBOX
    command: [sh, -c, "mkdir -p /www && echo ok > /www/healthz && exec httpd -f -p 8080 -h /www"]
    ports: [{name: http, containerPort: 8080}]
    readinessProbe:
      httpGet: {path: /healthz, port: http, httpHeaders: [{name: Host, value: probe.example}]}
      periodSeconds: 1
    livenessProbe:
      tcpSocket: {port: 8080}
      periodSeconds: 1
---
apiVersion: v1
kind: Pod
metadata: {name: unhealthy}
spec:
  # Far longer than the test waits: the kill must use the probe's own
  # grace, as the first attempt ignores SIGTERM (sleep as PID 1). Later
  # attempts (the emptyDir remembers the first) exit on SIGTERM, so that
  # the pod can be deleted.
  terminationGracePeriodSeconds: 300
  volumes: [{name: state, emptyDir: {}}]
  containers:
  - name: app
    image: BUSYBOX
    command: [sh, -c, "touch /tmp/alive; if [ -e /state/first ]; then trap 'exit 0' TERM; while :; do sleep 1; done; fi; touch /state/first; exec sleep 3600"]
    volumeMounts: [{name: state, mountPath: /state}]
    livenessProbe:
      exec: {command: [test, -f, /tmp/alive]}
      periodSeconds: 1
      failureThreshold: 2
      terminationGracePeriodSeconds: 1
---
apiVersion: v1
kind: Pod
metadata: {name: slow-period}
spec:
  terminationGracePeriodSeconds: 1
  # The app's probe worker starts with the pod: its first instants come
  # while the init container runs, and find no app container.
  initContainers:
  - name: init
    image: BUSYBOX
    command: [sleep, "3"]
  containers:
  - name: app
    image: BUSYBOX
    command: [sleep, "3600"]
    # Ten times as long as waitPod waits: only the probe made when the
    # container's status is first made can find it ready in time.
    readinessProbe:
      exec: {command: ["true"]}
      periodSeconds: 300
`

func selfCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func condition(p *corev1.Pod, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

func ready(p *corev1.Pod) bool {
	return condition(p, corev1.PodReady) == corev1.ConditionTrue && condition(p, corev1.ContainersReady) == corev1.ConditionTrue &&
		len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].Ready
}

// probeCount is prober_probe_total for one pod's probe type and result.
func probeCount(m *lifecycle.Manager, pod, probeType, result string) uint64 {
	for _, c := range m.ProbeCounts() {
		if c.Pod == pod && c.ProbeType == probeType && c.Result == result {
			return c.Value
		}
	}
	return 0
}

func TestProbesInRealContainers(t *testing.T) {
	r := newRig(t)
	m, _ := r.manager(t)
	ctx := context.Background()
	if _, err := m.Apply(ctx, r.pods(t, probedPods), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}

	t.Run("startup gates readiness, and readiness follows its exec probe", func(t *testing.T) {
		p := waitPod(t, m, "gated", "failed its startup probe twice", func(p *corev1.Pod) bool {
			return running(p) && probeCount(m, "gated", "Startup", "failed") >= 2
		})
		cs := p.Status.ContainerStatuses[0]
		if cs.Started == nil || *cs.Started || cs.Ready || condition(p, corev1.PodReady) != corev1.ConditionFalse {
			t.Fatalf("before the startup probe passed: started %v, ready %v, Ready %s", cs.Started, cs.Ready, condition(p, corev1.PodReady))
		}
		if n := probeCount(m, "gated", "Readiness", "failed") + probeCount(m, "gated", "Readiness", "successful"); n != 0 {
			t.Fatalf("readiness probed %d times before the container started", n)
		}
		r.exec(t, m, "gated", "app", "touch", "/tmp/started")
		p = waitPod(t, m, "gated", "started", func(p *corev1.Pod) bool {
			s := p.Status.ContainerStatuses[0].Started
			return s != nil && *s && probeCount(m, "gated", "Readiness", "failed") >= 1
		})
		if ready(p) || condition(p, corev1.ContainersReady) != corev1.ConditionFalse {
			t.Fatalf("ready without /tmp/ready: %+v", p.Status.Conditions)
		}
		r.exec(t, m, "gated", "app", "touch", "/tmp/ready")
		waitPod(t, m, "gated", "ready", ready)
		r.exec(t, m, "gated", "app", "rm", "/tmp/ready")
		p = waitPod(t, m, "gated", "not ready again", func(p *corev1.Pod) bool { return !ready(p) })
		if rc := p.Status.ContainerStatuses[0].RestartCount; rc != 0 {
			t.Fatalf("a readiness failure restarted the container (restartCount %d)", rc)
		}
	})

	t.Run("an exec probe costs this process one ExecSync call", func(t *testing.T) {
		// Measured, not asserted: the test process holds the whole
		// Manager, so the figure is an upper bound of nodeguard's share
		// (runc's exec in containerd's shim costs far more, outside it).
		p, _ := m.Get("default", "gated")
		id := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
		h := prober.Handlers{Exec: r.client}
		probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-f", "/tmp/started"}}}}
		const n = 40
		before, start := selfCPU(t), time.Now()
		for range n {
			if res, msg, err := h.Probe(ctx, probe, prober.Target{ContainerID: id}); res != prober.Success {
				t.Fatalf("exec probe: %v %q %v", res, msg, err)
			}
		}
		used, wall := selfCPU(t)-before, time.Since(start)
		// The Manager's own work over as long a window, without probes.
		idleBefore := selfCPU(t)
		time.Sleep(wall)
		idle := selfCPU(t) - idleBefore
		t.Logf("exec probe: %v of this process's CPU each, %v with the idle Manager's share (%v over %v) taken off (%d probes)",
			used/n, (used-idle)/n, idle, wall.Round(time.Millisecond), n)
		slow := &corev1.Probe{TimeoutSeconds: 1, ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sleep", "5"}}}}
		res, msg, err := h.Probe(ctx, slow, prober.Target{ContainerID: id})
		if res != prober.Failure || err != nil {
			t.Errorf("an exec probe past its timeoutSeconds: %v %q %v, want Failure", res, msg, err)
		}
	})

	t.Run("httpGet and tcpSocket probes reach the pod from the node's network namespace", func(t *testing.T) {
		waitPod(t, m, "web", "ready through its httpGet probe", ready)
		// Readiness may come first (probed when the status was made):
		// the liveness probe's first instant follows within its period.
		waitPod(t, m, "web", "probed live through its tcpSocket probe", func(*corev1.Pod) bool {
			return probeCount(m, "web", "Liveness", "successful") > 0
		})
	})

	t.Run("a new container's readiness is probed when it runs, not a period later", func(t *testing.T) {
		// The kubelet's prober manager triggers a readiness probe when
		// it makes the status of a started container not yet ready. Its
		// worker's first instants found no container (it starts with the
		// pod, whose init container runs 3 s), and the next is 300 s on.
		waitPod(t, m, "slow-period", "ready before its first period", ready)
		if n := probeCount(m, "slow-period", "Readiness", "successful"); n == 0 {
			t.Fatalf("ready without a successful readiness probe: %+v", m.ProbeCounts())
		}
	})

	t.Run("a failing liveness probe restarts the container with the probe's grace", func(t *testing.T) {
		waitPod(t, m, "unhealthy", "running", running)
		r.exec(t, m, "unhealthy", "app", "rm", "/tmp/alive")
		p := waitPod(t, m, "unhealthy", "restarted", func(p *corev1.Pod) bool {
			return len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].RestartCount >= 1 &&
				p.Status.ContainerStatuses[0].State.Running != nil
		})
		if n := probeCount(m, "unhealthy", "Liveness", "failed"); n < 2 {
			t.Fatalf("restarted after %d failed liveness probes, want at least failureThreshold 2", n)
		}
		// The new container made /tmp/alive again: it stays up.
		out, _, code := r.exec(t, m, "unhealthy", "app", "ls", "/tmp/alive")
		if code != 0 {
			t.Fatalf("the restarted container has no /tmp/alive: %q", out)
		}
		if rc := p.Status.ContainerStatuses[0].RestartCount; rc != 1 {
			t.Errorf("restartCount %d, want 1: the new container passes its probe", rc)
		}
	})

	for _, n := range []string{"gated", "web", "unhealthy", "slow-period"} {
		if err := m.Delete(ctx, "default", n); err != nil {
			t.Fatal(err)
		}
		waitGone(t, m, n)
	}
	if len(m.ProbeCounts()) != 0 {
		t.Errorf("probe series left after the pods went: %+v", m.ProbeCounts())
	}
}
