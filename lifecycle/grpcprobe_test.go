package lifecycle_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/prober"
)

// grpcPod serves the gRPC health protocol from the busybox image's
// grpchealth: the overall health (readiness) is SERVING once /tmp/ready
// exists, the "live" service (liveness) NOT_SERVING once /tmp/sick does.
// A new container has neither file.
const grpcPod = `
apiVersion: v1
kind: Pod
metadata: {name: grpc}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: server
    image: BUSYBOX
    command: [/bin/grpchealth, -port, "9090", "=/tmp/ready", "live=!/tmp/sick"]
    ports: [{name: grpc, containerPort: 9090}]
    readinessProbe:
      grpc: {port: 9090}
      periodSeconds: 1
      failureThreshold: 1
    livenessProbe:
      grpc: {port: 9090, service: live}
      periodSeconds: 1
      failureThreshold: 2
`

// podEvents returns the pod events in log about pod.
func podEvents(t *testing.T, log *api.EventLog, pod string) []lifecycle.PodEvent {
	t.Helper()
	var out []lifecycle.PodEvent
	for _, e := range log.EventsSince(context.Background(), 0, 0) {
		if e.Kind != lifecycle.PodEventKind {
			continue
		}
		var pe lifecycle.PodEvent
		if err := json.Unmarshal(e.Object, &pe); err != nil {
			t.Fatalf("pod event %s: %v", e.Object, err)
		}
		if pe.Pod == pod {
			out = append(out, pe)
		}
	}
	return out
}

// hasEvent reports whether evs has one of typ and reason whose message is
// msg.
func hasEvent(evs []lifecycle.PodEvent, typ, reason, fieldPath, msg string) bool {
	for _, e := range evs {
		if e.Type == typ && e.Reason == reason && e.FieldPath == fieldPath && e.Message == msg && e.Namespace == "default" {
			return true
		}
	}
	return false
}

func TestGRPCProbesInRealContainers(t *testing.T) {
	r := newRig(t)
	events := api.NewEventLog(0)
	r.events = events
	m, _ := r.manager(t)
	ctx := context.Background()
	if _, err := m.Apply(ctx, r.pods(t, grpcPod), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	const (
		notServing = `service unhealthy (responded with "NOT_SERVING")`
		fieldPath  = "spec.containers{server}"
	)

	t.Run("readiness fails while the server is NOT_SERVING, with an Unhealthy event each time", func(t *testing.T) {
		// The readiness probe may be one ahead of the liveness probe (a
		// started container that is not ready is probed when its status
		// is made), so both are waited for.
		p := waitPod(t, m, "grpc", "failed its gRPC readiness probe twice and passed its liveness probe", func(p *corev1.Pod) bool {
			return running(p) && probeCount(m, "grpc", "Readiness", "failed") >= 2 && probeCount(m, "grpc", "Liveness", "successful") > 0
		})
		if ready(p) {
			t.Fatalf("ready while NOT_SERVING: %+v", p.Status.Conditions)
		}
		evs := podEvents(t, events, "grpc")
		if !hasEvent(evs, corev1.EventTypeWarning, prober.ReasonUnhealthy, fieldPath, "Readiness probe failed: "+notServing) {
			t.Fatalf("no Warning Unhealthy %q event: %+v", "Readiness probe failed: "+notServing, evs)
		}
	})

	t.Run("readiness follows the server to SERVING", func(t *testing.T) {
		r.exec(t, m, "grpc", "server", "touch", "/tmp/ready")
		waitPod(t, m, "grpc", "ready through its gRPC probe", ready)
	})

	t.Run("a liveness service NOT_SERVING restarts the container, with the kubelet's events", func(t *testing.T) {
		r.exec(t, m, "grpc", "server", "touch", "/tmp/sick")
		p := waitPod(t, m, "grpc", "restarted", func(p *corev1.Pod) bool {
			cs := p.Status.ContainerStatuses
			return len(cs) > 0 && cs[0].RestartCount >= 1 && cs[0].State.Running != nil
		})
		if n := probeCount(m, "grpc", "Liveness", "failed"); n < 2 {
			t.Fatalf("restarted after %d failed liveness probes, want at least failureThreshold 2", n)
		}
		// The new container has no /tmp/ready: not ready until it says so.
		if p.Status.ContainerStatuses[0].Ready {
			t.Errorf("the new container is ready before its first SERVING")
		}
		evs := podEvents(t, events, "grpc")
		if !hasEvent(evs, corev1.EventTypeWarning, prober.ReasonUnhealthy, fieldPath, "Liveness probe failed: "+notServing) {
			t.Errorf("no Warning Unhealthy liveness event: %+v", evs)
		}
		if !hasEvent(evs, corev1.EventTypeNormal, lifecycle.ReasonKilling, fieldPath, "Container server failed liveness probe, will be restarted") {
			t.Errorf("no Normal Killing event: %+v", evs)
		}
		r.exec(t, m, "grpc", "server", "touch", "/tmp/ready")
		p = waitPod(t, m, "grpc", "ready again", ready)
		if rc := p.Status.ContainerStatuses[0].RestartCount; rc != 1 {
			t.Errorf("restartCount %d, want 1: the new container is live", rc)
		}
	})

	if err := m.Delete(ctx, "default", "grpc"); err != nil {
		t.Fatal(err)
	}
	waitGone(t, m, "grpc")
	for _, e := range podEvents(t, events, "grpc") {
		if !strings.HasPrefix(e.Message, "Readiness probe failed: ") && !strings.HasPrefix(e.Message, "Liveness probe failed: ") &&
			e.Reason != lifecycle.ReasonKilling && e.Reason != "Pulled" && // the image manager's, at each start
			e.Reason != lifecycle.ReasonCreated && e.Reason != lifecycle.ReasonStarted {
			t.Errorf("unexpected event %+v", e)
		}
	}
}
