package lifecycle_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/lifecycle"
)

// events keeps the Manager's events for a test.
type events struct {
	mu   sync.Mutex
	list []lifecycle.PodEvent
}

func (e *events) Append(_ time.Time, kind string, obj any) {
	if ev, ok := obj.(lifecycle.PodEvent); ok && kind == lifecycle.PodEventKind {
		e.mu.Lock()
		e.list = append(e.list, ev)
		e.mu.Unlock()
	}
}

// find returns the first event of pod with reason, if any.
func (e *events) find(pod, reason string) (lifecycle.PodEvent, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.list {
		if ev.Namespace == "default" && ev.Pod == pod && ev.Reason == reason {
			return ev, true
		}
	}
	return lifecycle.PodEvent{}, false
}

// hookPods: every hook handler nodeguard runs, in real containers. The
// hostPath volume (beneath the test's HOSTDIR) outlives the pods, so that
// what a container saw at its TERM can be read after its deletion.
const hookPods = `
apiVersion: v1
kind: Pod
metadata: {name: poststart}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: BUSYBOX
    # The main process sees what the hook wrote, once the test lets the
    # hook finish.
    command: [sh, -c, "until [ -e /tmp/hook ]; do sleep 0.1; done; cp /tmp/hook /tmp/seen; exec sleep 3600"]
    lifecycle:
      postStart:
        exec: {command: [sh, -c, "echo written by postStart > /tmp/hook; until [ -e /tmp/go ]; do sleep 0.1; done"]}
---
apiVersion: v1
kind: Pod
metadata: {name: badstart}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: BUSYBOX
    command: [sleep, "3600"]
    lifecycle:
      postStart:
        exec: {command: [sh, -c, "echo boom >&2; exit 3"]}
---
apiVersion: v1
kind: Pod
metadata: {name: prestop}
spec:
  terminationGracePeriodSeconds: 20
  volumes: [{name: state, hostPath: {path: HOSTDIR/prestop, type: DirectoryOrCreate}}]
  containers:
  - name: exec
    image: BUSYBOX
    # Its TERM handler says whether the preStop hook ran before it.
    command: [sh, -c, "trap 'if [ -e /state/hook ]; then echo after-hook; else echo before-hook; fi > /state/term; exit 0' TERM; while :; do sleep 0.2; done"]
    volumeMounts: [{name: state, mountPath: /state}]
    lifecycle:
      preStop:
        exec: {command: [sh, -c, "date +%s > /state/hook"]}
  - name: sleep
    image: BUSYBOX
    command: [sh, -c, "trap 'date +%s > /state/sleep-term; exit 0' TERM; while :; do sleep 0.2; done"]
    volumeMounts: [{name: state, mountPath: /state}]
    lifecycle:
      preStop:
        sleep: {seconds: 3}
---
apiVersion: v1
kind: Pod
metadata: {name: stuckhook}
spec:
  terminationGracePeriodSeconds: 2
  volumes: [{name: state, hostPath: {path: HOSTDIR/stuck, type: DirectoryOrCreate}}]
  containers:
  - name: app
    image: BUSYBOX
    # sleep as PID 1 ignores TERM, and the hook never ends by itself.
    command: [sleep, "3600"]
    volumeMounts: [{name: state, mountPath: /state}]
    lifecycle:
      preStop:
        exec: {command: [sh, -c, "touch /state/hook-started; exec sleep 3600"]}
---
apiVersion: v1
kind: Pod
metadata: {name: webhooks}
spec:
  # httpd as PID 1 ignores TERM: it waits out the grace.
  terminationGracePeriodSeconds: 2
  volumes: [{name: state, hostPath: {path: HOSTDIR/web, type: DirectoryOrCreate}}]
  containers:
  - name: web
    image: BUSYBOX
    # A CGI script notes each hook's request: its query names the hook,
    # the file holds the header it was sent with.
    command:
    - sh
    - -c
    - |
      mkdir -p /www/cgi-bin
      printf '#!/bin/sh\necho "$HTTP_X_HOOK" > /state/$QUERY_STRING\nprintf "Content-Type: text/plain\\r\\n\\r\\nok\\n"\n' > /www/cgi-bin/hit
      chmod +x /www/cgi-bin/hit
      exec httpd -f -p 8080 -h /www
    ports: [{name: http, containerPort: 8080}]
    volumeMounts: [{name: state, mountPath: /state}]
    lifecycle:
      preStop:
        httpGet: {path: "/cgi-bin/hit?prestop", port: http, httpHeaders: [{name: X-Hook, value: pre}]}
  - name: client
    image: BUSYBOX
    command: [sh, -c, "trap 'exit 0' TERM; while :; do sleep 0.2; done"]
    lifecycle:
      postStart:
        # web may not listen yet when client starts: a failed hook
        # restarts client, as under the kubelet, until one gets through.
        httpGet: {path: "/cgi-bin/hit?poststart", port: 8080, httpHeaders: [{name: X-Hook, value: post}]}
`

func TestLifecycleHooksInRealContainers(t *testing.T) {
	r := newRig(t)
	ev := &events{}
	r.events = ev
	m, _ := r.manager(t)
	ctx := context.Background()
	yaml := strings.ReplaceAll(hookPods, "HOSTDIR", r.hostDir)
	if _, err := m.Apply(ctx, r.pods(t, yaml), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	del := func(t *testing.T, name string) {
		t.Helper()
		if err := m.Delete(ctx, "default", name); err != nil {
			t.Fatal(err)
		}
		waitGone(t, m, name)
	}

	t.Run("postStart exec runs before the container counts as running, and the main process sees what it wrote", func(t *testing.T) {
		id := r.containerOf(t, "poststart", "app")
		// The hook waits for /tmp/go: until the test makes it, the
		// container is not running in the pod's status.
		r.waitExec(t, id, "test", "-e", "/tmp/hook")
		if p, ok := m.Get("default", "poststart"); !ok {
			t.Fatal("pod poststart is gone")
		} else if cs := containerStatus(p, "app"); cs != nil && (cs.State.Running != nil || (cs.Started != nil && *cs.Started)) {
			t.Fatalf("app is running in the status while its postStart hook runs: %+v", cs.State)
		}
		if _, stderr, code := r.execID(t, id, "touch", "/tmp/go"); code != 0 {
			t.Fatalf("touch /tmp/go: %d %s", code, stderr)
		}
		p := waitPod(t, m, "poststart", "running", func(p *corev1.Pod) bool {
			cs := containerStatus(p, "app")
			return running(p) && cs != nil && cs.State.Running != nil && cs.Started != nil && *cs.Started
		})
		out, _, code := r.exec(t, m, "poststart", "app", "cat", "/tmp/seen")
		if code != 0 || out != "written by postStart\n" {
			t.Fatalf("the main process saw %q (exit %d), want what postStart wrote", out, code)
		}
		if rc := containerStatus(p, "app").RestartCount; rc != 0 {
			t.Errorf("restartCount %d after a successful postStart", rc)
		}
		del(t, "poststart")
	})

	t.Run("a failed postStart kills the container, says why in its status and an event, and the back-off restarts it", func(t *testing.T) {
		p := waitPod(t, m, "badstart", "restarted after its postStart failed", func(p *corev1.Pod) bool {
			cs := containerStatus(p, "app")
			if cs == nil || cs.RestartCount < 1 {
				return false
			}
			term := cs.LastTerminationState.Terminated
			return cs.State.Waiting != nil && term != nil && term.Reason == lifecycle.EventFailedPostStartHook
		})
		cs := containerStatus(p, "app")
		w, term := cs.State.Waiting, cs.LastTerminationState.Terminated
		if w.Reason != lifecycle.ReasonPostStartHookError && w.Reason != "CrashLoopBackOff" {
			t.Errorf("waiting reason %q, want %s or CrashLoopBackOff", w.Reason, lifecycle.ReasonPostStartHookError)
		}
		for _, want := range []string{"Exec lifecycle hook ([sh -c echo boom >&2; exit 3])", `for Container "app" in Pod "default/badstart"`, "exited with 3", "boom"} {
			if !strings.Contains(term.Message, want) {
				t.Errorf("last termination message %q lacks %q", term.Message, want)
			}
		}
		e, ok := ev.find("badstart", lifecycle.EventFailedPostStartHook)
		if !ok || e.Type != corev1.EventTypeWarning || e.FieldPath != "spec.containers{app}" || !strings.Contains(e.Message, "exited with 3") {
			t.Errorf("event %+v (found %v), want a Warning FailedPostStartHook of app with the hook's message", e, ok)
		}
		del(t, "badstart")
	})

	t.Run("preStop exec runs before TERM, preStop sleep delays TERM inside the grace period", func(t *testing.T) {
		waitPod(t, m, "prestop", "running", func(p *corev1.Pod) bool {
			a, b := containerStatus(p, "exec"), containerStatus(p, "sleep")
			return running(p) && a != nil && a.State.Running != nil && b != nil && b.State.Running != nil
		})
		// Whole seconds, as date +%s in the container has them.
		deleted := time.Now().Unix()
		del(t, "prestop")
		dir := filepath.Join(r.hostDir, "prestop")
		if got := readTrim(t, filepath.Join(dir, "term")); got != "after-hook" {
			t.Errorf("the TERM handler ran %s the preStop hook's file existed, want after-hook", got)
		}
		termAt, err := strconv.ParseInt(readTrim(t, filepath.Join(dir, "sleep-term")), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		// A lower bound the hook guarantees, not a speed: TERM came after
		// the 3 s sleep (less one for the whole seconds).
		if termAt-deleted < 2 {
			t.Errorf("sleep's TERM came %d s after the deletion, want the preStop sleep of 3 s first", termAt-deleted)
		}
		t.Logf("preStop sleep 3 s: TERM %d s after the deletion (grace 20 s)", termAt-deleted)
	})

	t.Run("a preStop hook that outlives the grace period is cut off and the container killed", func(t *testing.T) {
		waitPod(t, m, "stuckhook", "running", running)
		del(t, "stuckhook") // within waitGone's 30 s, not the hook's hour
		if _, err := os.Stat(filepath.Join(r.hostDir, "stuck", "hook-started")); err != nil {
			t.Errorf("the preStop hook never ran: %v", err)
		}
		if _, ok := ev.find("stuckhook", lifecycle.EventFailedPreStopHook); !ok {
			t.Errorf("no FailedPreStopHook event for the hook cut off at the grace")
		}
	})

	t.Run("httpGet hooks reach a server in the pod from the node's network namespace", func(t *testing.T) {
		dir := filepath.Join(r.hostDir, "web")
		waitPod(t, m, "webhooks", "client running after its postStart reached web", func(p *corev1.Pod) bool {
			cs := containerStatus(p, "client")
			_, err := os.Stat(filepath.Join(dir, "poststart"))
			return err == nil && cs != nil && cs.State.Running != nil
		})
		if got := readTrim(t, filepath.Join(dir, "poststart")); got != "post" {
			t.Errorf("the postStart request came with X-Hook %q, want post", got)
		}
		del(t, "webhooks")
		if got := readTrim(t, filepath.Join(dir, "prestop")); got != "pre" {
			t.Errorf("the preStop request came with X-Hook %q, want pre", got)
		}
		if _, ok := ev.find("webhooks", lifecycle.EventFailedPreStopHook); ok {
			t.Errorf("a FailedPreStopHook event for a hook that was answered")
		}
	})
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// containerOf waits for the runtime to have container name of pod, and
// returns its ID: before the Manager's status knows of it.
func (r *rig) containerOf(t *testing.T, pod, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		list, err := r.client.ListContainers(cctx, "", nil)
		ccancel()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range list {
			if c.GetLabels()["io.kubernetes.pod.name"] == pod && c.GetMetadata().GetName() == name {
				return c.Id
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no container %s of pod %s in the runtime", name, pod)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitExec runs cmd in container id until it exits 0: the container may
// still be starting.
func (r *rig) waitExec(t *testing.T, id string, cmd ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		res, err := r.client.ExecSync(cctx, id, cmd, 5*time.Second)
		ccancel()
		if err == nil && res.ExitCode == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%v in %s never succeeded: %v %+v", cmd, id, err, res)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// execID runs cmd in container id through the runtime directly (the
// Manager's Exec finds containers by pod).
func (r *rig) execID(t *testing.T, id string, cmd ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	res, err := r.client.ExecSync(ctx, id, cmd, 10*time.Second)
	if err != nil {
		t.Fatalf("exec %v in %s: %v", cmd, id, err)
	}
	return string(res.Stdout), string(res.Stderr), int(res.ExitCode)
}
