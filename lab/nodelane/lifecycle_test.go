//go:build nodelane

package nodelane

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// readState reads the files of a pod's emptyDir the check waits for; a
// missing one is "".
func readState(dir string, names ...string) map[string]string {
	m := map[string]string{}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err == nil {
			m[n] = strings.TrimSpace(string(b))
		}
	}
	return m
}

// ack lets the TERM handler that waits for it exit (the pod's directory
// goes after that).
func ack(t *testing.T, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "ack"), nil, 0o644); err != nil {
		t.Errorf("let the TERM handler end: %v", err)
	}
}

// hooks checks postStart exec and the three preStop handlers of
// testdata/hooks.yaml, reading what the hooks and the TERM handlers wrote
// in the pod's emptyDir from the node.
func hooks(t *testing.T, rootDir string, uids map[string]string) {
	pod := waitPod(t, hooksPod, "Running with its three containers started", podsBound, func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && started(status(p, "app")) && started(status(p, "web")) && started(status(p, "sleeper"))
	})
	uid := string(pod.UID)
	uids[hooksPod.Name] = uid
	state := emptyDir(rootDir, uid, "state")
	var seen map[string]string
	if _, err := waitFor("app's copy of what postStart wrote", podsBound, func() (bool, string, error) {
		seen = readState(state, "seen")
		return seen["seen"] != "", state + " has " + present(seen), nil
	}); err != nil {
		t.Fatal(err)
	}
	if seen["seen"] != "written by postStart" {
		t.Errorf("the main process saw %q in /tmp/hook, want what postStart wrote", seen["seen"])
	}
	if rc := status(pod, "app").RestartCount; rc != 0 {
		t.Errorf("app restarted %d times after a postStart that succeeded", rc)
	}

	// Whole seconds, as date +%s in the container has them.
	deleted := time.Now().Unix()
	t0 := time.Now()
	rmPod(t, hooksPod)
	names := []string{"app-term", "web-term", "sleeper-term", "prestop-exec", "prestop-http"}
	var got map[string]string
	_, err := waitFor("the three TERM handlers' files", terminateBound, func() (bool, string, error) {
		got = readState(state, names...)
		return got["app-term"] != "" && got["web-term"] != "" && got["sleeper-term"] != "", state + " has " + present(got), nil
	})
	ack(t, state)
	if err != nil {
		t.Fatalf("%v: a container got no TERM within %s of pod rm, or its preStop hook held it; journal:\n%s", err, terminateBound, journalText("nodeguard", 20))
	}
	for _, c := range []struct{ file, hook string }{{"app-term", "exec"}, {"web-term", "httpGet"}} {
		if got[c.file] != "after-prestop" {
			t.Errorf("%s: the TERM handler ran %s the preStop %s hook's file existed, want after-prestop", c.file, got[c.file], c.hook)
		}
	}
	if got["prestop-http"] != "pre" {
		t.Errorf("the preStop httpGet request's X-Hook header was %q, want pre", got["prestop-http"])
	}
	termAt, err := strconv.ParseInt(got["sleeper-term"], 10, 64)
	if err != nil {
		t.Fatalf("sleeper-term: %v", err)
	}
	// A lower bound the hook guarantees, not a speed: TERM came after the
	// 3 s sleep (less one for the whole seconds).
	if termAt-deleted < 2 {
		t.Errorf("sleeper's TERM came %d s after pod rm, want the preStop sleep of 3 s first", termAt-deleted)
	}
	d := waitUnmounted(t, rootDir, uid, deleteBound)
	t.Logf("postStart's file seen by the main process; after pod rm: exec and httpGet (X-Hook %q) hooks before TERM, sleeper's TERM %d s after (preStop sleep 3 s); the pod gone %s after pod rm (its directory %s after the last handler)",
		got["prestop-http"], termAt-deleted, time.Since(t0).Round(time.Millisecond), d.Round(time.Millisecond))
}

// present names the files readState found, for wait messages.
func present(m map[string]string) string {
	return strings.Join(slices.Sorted(maps.Keys(m)), ",")
}

// events reads the lines of the sidecar pod's /out/events (none while it
// is missing).
func events(dir string) []string {
	b, err := os.ReadFile(filepath.Join(dir, "events"))
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// sidecars checks testdata/sidecars.yaml: the start order, the sidecar's
// restart under restartPolicy Never, and the stop order.
func sidecars(t *testing.T, rootDir string, uids map[string]string) {
	pod := waitPod(t, sidecarsPod, "Running with the sidecar and the app started", podsBound, func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && started(status(p, "logger")) && started(status(p, "app"))
	})
	uid := string(pod.UID)
	uids[sidecarsPod.Name] = uid
	out := emptyDir(rootDir, uid, "out")
	var got []string
	if _, err := waitFor("app's first line", podsBound, func() (bool, string, error) {
		got = events(out)
		return slices.Contains(got, "start app"), strings.Join(got, " | "), nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"start logger", "setup", "start app"}; !slices.Equal(got, want) {
		t.Errorf("the containers wrote %q, want %q: logger up (its startup probe passed) before setup, setup done before app", got, want)
	}
	if x := status(pod, "setup").State.Terminated; x == nil || x.ExitCode != 0 {
		t.Errorf("init container setup: %+v, want terminated with exit 0", status(pod, "setup").State)
	}
	app := status(pod, "app")

	// restartPolicy Never, and the sidecar is restarted all the same.
	if out, err := podExec(sidecarsPod, "logger", "touch", "/tmp/crash"); err != nil {
		t.Fatalf("make the sidecar exit: %v %s", err, out)
	}
	pod = waitPod(t, sidecarsPod, "with its sidecar restarted and started again", probeBound, func(p *corev1.Pod) bool {
		return status(p, "logger").RestartCount >= 1 && started(status(p, "logger"))
	})
	if a := status(pod, "app"); a.RestartCount != 0 || a.ContainerID != app.ContainerID || a.State.Running == nil {
		t.Errorf("app was touched by the sidecar's restart: %s", describePod(pod))
	}
	if x := status(pod, "logger").LastTerminationState.Terminated; x == nil || x.ExitCode != 3 {
		t.Errorf("the sidecar's last termination %+v, want its exit 3", status(pod, "logger").LastTerminationState)
	}
	if pod.Status.Phase != corev1.PodRunning {
		t.Errorf("phase %s after the sidecar's restart, want Running", pod.Status.Phase)
	}

	t0 := time.Now()
	rmPod(t, sidecarsPod)
	_, err := waitFor("the sidecar's TERM", terminateBound, func() (bool, string, error) {
		got = events(out)
		return slices.Contains(got, "stop logger"), strings.Join(got, " | "), nil
	})
	ack(t, out)
	if err != nil {
		t.Fatalf("%v; journal:\n%s", err, journalText("nodeguard", 20))
	}
	// app waits 2 s on TERM before it writes: a sidecar stopped with it
	// would have written first.
	if i, j := slices.Index(got, "stop app"), slices.Index(got, "stop logger"); i < 0 || i > j {
		t.Errorf("the containers wrote %q: the sidecar got TERM before the app had stopped", got)
	}
	d := waitUnmounted(t, rootDir, uid, deleteBound)
	t.Logf("the containers wrote %q; the sidecar restarted under restartPolicy Never; the pod gone %s after pod rm (%s after the sidecar's TERM)",
		got, time.Since(t0).Round(time.Millisecond), d.Round(time.Millisecond))
}

// podEvent is a pod event of the agent's event log (`nodeguard events
// --agent --json`), as lifecycle.PodEvent marshals it.
type podEvent struct {
	Type, Reason, Message, Namespace, Pod, FieldPath string
}

// agentPodEvents reads the agent's event log from its start, for a few
// seconds (the command follows it by long polls until --duration).
func agentPodEvents(namespace, pod string) ([]podEvent, error) {
	out, err := stdout(cmdTimeout, "/usr/local/bin/nodeguard", "events", "--agent", "--json", "--duration", "3s")
	if err != nil {
		return nil, err
	}
	var evs []podEvent
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var e struct {
			Kind   string          `json:"kind"`
			Object json.RawMessage `json:"object"`
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			return nil, errors.Join(errors.New("parse nodeguard events --agent --json"), err)
		}
		if e.Kind != "pod" {
			continue
		}
		var pe podEvent
		if err := json.Unmarshal(e.Object, &pe); err != nil {
			return nil, errors.Join(errors.New("parse a pod event"), err)
		}
		if pe.Namespace == namespace && pe.Pod == pod {
			evs = append(evs, pe)
		}
	}
	return evs, nil
}

// grpcProbes checks testdata/grpc-probes.yaml's probes against
// /bin/grpchealth. Like the other subtests' functions it records the pod's
// uid in uids once it knows it (the leftovers subtest looks for what is
// left of it).
func grpcProbes(t *testing.T, uids map[string]string) {
	pod := waitPod(t, grpcPod, "Running, not ready while NOT_SERVING", podsBound, func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && status(p, "server").State.Running != nil
	})
	uids[grpcPod.Name] = string(pod.UID)
	if podReady(pod) || status(pod, "server").Ready {
		t.Errorf("ready while the server says NOT_SERVING: %s", describePod(pod))
	}
	if out, err := podExec(grpcPod, "server", "touch", "/tmp/ready"); err != nil {
		t.Fatalf("touch /tmp/ready: %v %s", err, out)
	}
	t0 := time.Now()
	pod = waitPod(t, grpcPod, "Ready through its gRPC readiness probe", probeBound, func(p *corev1.Pod) bool {
		return podReady(p) && status(p, "server").Ready
	})
	ready := time.Since(t0)
	first := status(pod, "server")

	if out, err := podExec(grpcPod, "server", "touch", "/tmp/sick"); err != nil {
		t.Fatalf("touch /tmp/sick: %v %s", err, out)
	}
	t0 = time.Now()
	pod = waitPod(t, grpcPod, "restarted by its gRPC liveness probe", probeBound, func(p *corev1.Pod) bool {
		cs := status(p, "server")
		return cs.RestartCount >= 1 && cs.State.Running != nil && cs.ContainerID != first.ContainerID
	})
	restarted := time.Since(t0)
	// The new container has no /tmp/ready: not ready until it says so.
	if status(pod, "server").Ready {
		t.Errorf("the new container is ready before its first SERVING: %s", describePod(pod))
	}
	if out, err := podExec(grpcPod, "server", "touch", "/tmp/ready"); err != nil {
		t.Fatalf("touch /tmp/ready in the new container: %v %s", err, out)
	}
	pod = waitPod(t, grpcPod, "Ready again", probeBound, func(p *corev1.Pod) bool { return podReady(p) && status(p, "server").Ready })
	if rc := status(pod, "server").RestartCount; rc != 1 {
		t.Errorf("restartCount %d, want 1: the new container is live", rc)
	}

	evs, err := agentPodEvents(grpcPod.Namespace, grpcPod.Name)
	if err != nil {
		t.Fatal(err)
	}
	const notServing = `service unhealthy (responded with "NOT_SERVING")`
	for _, want := range []podEvent{
		{Type: corev1.EventTypeWarning, Reason: "Unhealthy", Message: "Readiness probe failed: " + notServing},
		{Type: corev1.EventTypeWarning, Reason: "Unhealthy", Message: "Liveness probe failed: " + notServing},
		{Type: corev1.EventTypeNormal, Reason: "Killing", Message: "Container server failed liveness probe, will be restarted"},
	} {
		want.Namespace, want.Pod, want.FieldPath = grpcPod.Namespace, grpcPod.Name, "spec.containers{server}"
		if !slices.Contains(evs, want) {
			t.Errorf("no %s %s event %q in the agent's log: %+v", want.Type, want.Reason, want.Message, evs)
		}
	}
	rmPod(t, grpcPod)
	t.Logf("Ready %s after /tmp/ready, restarted %s after /tmp/sick (%d events of the pod)", ready.Round(time.Millisecond), restarted.Round(time.Millisecond), len(evs))
}
