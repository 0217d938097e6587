package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/api/apitest"
)

const podWebYAML = `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: nginx
    image: nginx:1.27
    resources:
      limits: {cpu: 100m, memory: 64Mi}
  - name: sidecar
    image: busybox:1.36
`

const podDBJSON = `{"apiVersion": "v1", "kind": "Pod",
 "metadata": {"name": "db", "namespace": "data"},
 "spec": {"containers": [{"name": "pg", "image": "postgres:17"}]}}
`

// podEnv is an API server with a fake pod service, and the clock the CLI
// ages pods with: 90 minutes after the fake created them.
type podEnv struct {
	fake *apitest.Fake
	path string
	now  time.Time
}

func newPodEnv(t *testing.T) *podEnv {
	t.Helper()
	created := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f := apitest.NewFake(func() time.Time { return created })
	_, path := apitest.Serve(t, f, api.Options{})
	return &podEnv{fake: f, path: path, now: created.Add(90 * time.Minute)}
}

// run runs `pod SUB --api-socket PATH ARGS...` with stdin and returns its
// stdout, stderr and error.
func (e *podEnv) run(t *testing.T, stdin string, sub string, args ...string) (string, string, error) {
	t.Helper()
	cmd := podCommand(&podCLI{now: func() time.Time { return e.now }})
	cmd.SilenceErrors, cmd.SilenceUsage = true, true // as under the root
	var out, errb bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetArgs(append([]string{sub, "--api-socket", e.path}, args...))
	err := cmd.ExecuteContext(t.Context())
	return out.String(), errb.String(), err
}

// mustRun is run that fails the test on an error.
func (e *podEnv) mustRun(t *testing.T, sub string, args ...string) string {
	t.Helper()
	out, stderr, err := e.run(t, "", sub, args...)
	if err != nil {
		t.Fatalf("pod %s %v: %v\nstderr: %s", sub, args, err, stderr)
	}
	return out
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPodApply(t *testing.T) {
	t.Run("apply -f FILE prints one line per pod and sends the absolute path as source", func(t *testing.T) {
		e := newPodEnv(t)
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{"pods.yaml": podWebYAML + "---\n" + podDBJSON})
		t.Chdir(dir)
		out := e.mustRun(t, "apply", "-f", "pods.yaml")
		if out != "pod/db applied\npod/web applied\n" {
			t.Fatalf("got %q", out)
		}
		if src, _ := e.fake.Source("default", "web"); src != filepath.Join(dir, "pods.yaml") {
			t.Fatalf("source %q", src)
		}
	})

	t.Run("apply -f DIR sends every manifest file in name order and skips the rest", func(t *testing.T) {
		e := newPodEnv(t)
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{
			"b-web.yaml": podWebYAML,
			"a-db.json":  podDBJSON,
			"c.yml":      strings.ReplaceAll(podWebYAML, "name: web", "name: web2"),
			"README.md":  "not a manifest",
		})
		if err := os.Mkdir(filepath.Join(dir, "d.yaml"), 0o755); err != nil {
			t.Fatal(err)
		}
		out := e.mustRun(t, "apply", "-f", dir)
		if out != "pod/db applied\npod/web applied\npod/web2 applied\n" {
			t.Fatalf("got %q", out)
		}
		if src, _ := e.fake.Source("default", "web2"); src != filepath.Join(dir, "c.yml") {
			t.Fatalf("source of web2 %q", src)
		}
	})

	t.Run("apply -f - reads stdin", func(t *testing.T) {
		e := newPodEnv(t)
		out, _, err := e.run(t, podWebYAML, "apply", "-f", "-")
		if err != nil || out != "pod/web applied\n" {
			t.Fatalf("got %q, %v", out, err)
		}
		if src, _ := e.fake.Source("default", "web"); src != "stdin" {
			t.Fatalf("source %q", src)
		}
	})

	t.Run("a malformed manifest fails naming the file and the field, and applies nothing", func(t *testing.T) {
		e := newPodEnv(t)
		dir := t.TempDir()
		bad := filepath.Join(dir, "bad.yaml")
		writeFiles(t, dir, map[string]string{"bad.yaml": podWebYAML + "    imagee: x\n"})
		_, _, err := e.run(t, "", "apply", "-f", bad)
		if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), bad+": document 1: spec.containers[1].imagee: unknown field") {
			t.Fatalf("got %v", err)
		}
		if n := len(e.fake.List()); n != 0 {
			t.Fatalf("%d pods applied", n)
		}
	})

	t.Run("in a directory a refused file fails the command but not the files beside it", func(t *testing.T) {
		e := newPodEnv(t)
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{
			"a.yaml": strings.ReplaceAll(podWebYAML, "image: nginx:1.27", "image: ''"),
			"b.json": podDBJSON,
		})
		out, _, err := e.run(t, "", "apply", "-f", dir)
		if out != "pod/db applied\n" {
			t.Errorf("stdout %q", out)
		}
		want := filepath.Join(dir, "a.yaml") + ": invalid:\npod default/web: spec.containers[0].image: Required value"
		if err == nil || err.Error() != want {
			t.Fatalf("got %v\nwant %s", err, want)
		}
	})

	t.Run("a directory without manifests is an error", func(t *testing.T) {
		e := newPodEnv(t)
		dir := t.TempDir()
		_, _, err := e.run(t, "", "apply", "-f", dir)
		if err == nil || !strings.Contains(err.Error(), "no *.yaml, *.yml or *.json files") {
			t.Fatalf("got %v", err)
		}
	})

	t.Run("apply without -f is an error", func(t *testing.T) {
		e := newPodEnv(t)
		if _, _, err := e.run(t, "", "apply"); err == nil || !strings.Contains(err.Error(), `"filename" not set`) {
			t.Fatalf("got %v", err)
		}
	})
}

// applyBoth applies web (default) and db (data).
func applyBoth(t *testing.T, e *podEnv) {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"pods.yaml": podWebYAML + "---\n" + podDBJSON})
	e.mustRun(t, "apply", "-f", filepath.Join(dir, "pods.yaml"))
}

func TestPodLs(t *testing.T) {
	e := newPodEnv(t)

	t.Run("with no pods it says so on stderr", func(t *testing.T) {
		out, stderr, err := e.run(t, "", "ls")
		if err != nil || out != "" || stderr != "No pods found.\n" {
			t.Fatalf("got %q %q %v", out, stderr, err)
		}
	})

	applyBoth(t, e)

	t.Run("the table has kubectl's columns plus IP and QOS", func(t *testing.T) {
		want := "" +
			"NAMESPACE   NAME   READY   STATUS    RESTARTS   AGE   IP          QOS\n" +
			"data        db     1/1     Running   0          90m   10.88.0.3   BestEffort\n" +
			"default     web    2/2     Running   0          90m   10.88.0.2   Burstable\n"
		if out := e.mustRun(t, "ls"); out != want {
			t.Fatalf("got\n%s\nwant\n%s", out, want)
		}
	})

	t.Run("-n keeps one namespace", func(t *testing.T) {
		out := e.mustRun(t, "ls", "-n", "data")
		if strings.Contains(out, "web") || !strings.Contains(out, "db") {
			t.Fatalf("got\n%s", out)
		}
	})

	t.Run("-o json prints a v1 PodList", func(t *testing.T) {
		out := e.mustRun(t, "ls", "-o", "json")
		var l corev1.PodList
		if err := json.Unmarshal([]byte(out), &l); err != nil {
			t.Fatal(err)
		}
		if l.Kind != "PodList" || l.APIVersion != "v1" || len(l.Items) != 2 || l.Items[1].Status.PodIP != "10.88.0.2" {
			t.Fatalf("got %s %s %d items", l.APIVersion, l.Kind, len(l.Items))
		}
		if !strings.HasPrefix(out, "{\n    \"kind\": \"PodList\"") {
			t.Errorf("not indented as kubectl does:\n%.80s", out)
		}
	})

	t.Run("-o yaml prints the same list", func(t *testing.T) {
		var l corev1.PodList
		if err := yaml.UnmarshalStrict([]byte(e.mustRun(t, "ls", "-o", "yaml")), &l); err != nil {
			t.Fatal(err)
		}
		if l.Kind != "PodList" || len(l.Items) != 2 {
			t.Fatalf("got %s with %d items", l.Kind, len(l.Items))
		}
	})

	t.Run("an unknown output format is an error", func(t *testing.T) {
		if _, _, err := e.run(t, "", "ls", "-o", "wide"); err == nil || !strings.Contains(err.Error(), `--output "wide"`) {
			t.Fatalf("got %v", err)
		}
	})
}

func TestPodGet(t *testing.T) {
	e := newPodEnv(t)
	applyBoth(t, e)

	t.Run("-o yaml prints the v1 Pod with its status, fit to apply again", func(t *testing.T) {
		out := e.mustRun(t, "get", "web", "-o", "yaml")
		var p corev1.Pod
		if err := yaml.UnmarshalStrict([]byte(out), &p); err != nil {
			t.Fatal(err)
		}
		if p.Kind != "Pod" || p.APIVersion != "v1" || p.Name != "web" || p.UID == "" || p.Status.Phase != corev1.PodRunning || p.Status.QOSClass != corev1.PodQOSBurstable {
			t.Fatalf("got %s %s %s uid %q phase %q qos %q", p.APIVersion, p.Kind, p.Name, p.UID, p.Status.Phase, p.Status.QOSClass)
		}
		if out, _, err := e.run(t, out, "apply", "-f", "-"); err != nil || out != "pod/web applied\n" {
			t.Fatalf("re-apply of get -o yaml: %q, %v", out, err)
		}
	})

	t.Run("-o json and -n find a pod in another namespace", func(t *testing.T) {
		var p corev1.Pod
		if err := json.Unmarshal([]byte(e.mustRun(t, "get", "db", "-n", "data", "-o", "json")), &p); err != nil {
			t.Fatal(err)
		}
		if p.Namespace != "data" || p.Kind != "Pod" || len(p.Status.ContainerStatuses) != 1 {
			t.Fatalf("got %s/%s kind %q", p.Namespace, p.Name, p.Kind)
		}
	})

	t.Run("without -o it prints the table row", func(t *testing.T) {
		out := e.mustRun(t, "get", "web")
		if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[1], "default     web    2/2     Running") {
			t.Fatalf("got\n%s", out)
		}
	})

	t.Run("an unknown pod is an error wrapping ErrNotFound", func(t *testing.T) {
		_, _, err := e.run(t, "", "get", "db") // db lives in data, not default
		if !errors.Is(err, api.ErrNotFound) || err.Error() != "pod default/db not found" {
			t.Fatalf("got %v", err)
		}
	})
}

func TestPodRm(t *testing.T) {
	e := newPodEnv(t)
	applyBoth(t, e)
	if out := e.mustRun(t, "rm", "db", "-n", "data"); out != "pod/db deleted\n" {
		t.Fatalf("got %q", out)
	}
	if _, ok := e.fake.Get("data", "db"); ok {
		t.Fatal("db is still there")
	}
	if _, _, err := e.run(t, "", "rm", "db", "-n", "data"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("second rm: %v", err)
	}
}

func TestPodLogs(t *testing.T) {
	e := newPodEnv(t)
	applyBoth(t, e)
	e.fake.SetLogs("default", "web", "sidecar", "one\ntwo\nthree\n")
	e.fake.SetLogs("default", "web", "nginx", "ready\n")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"--tail and -c choose the lines and the container", []string{"web", "-c", "sidecar", "--tail", "2"}, "two\nthree\n"},
		{"the default is the whole log of the default container", []string{"web"}, "ready\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if out := e.mustRun(t, "logs", tc.args...); out != tc.want {
				t.Fatalf("got %q, want %q", out, tc.want)
			}
		})
	}
	t.Run("an unknown container is an error", func(t *testing.T) {
		if _, _, err := e.run(t, "", "logs", "web", "-c", "nope"); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("got %v", err)
		}
	})
}

// TestPodLogsFlags: kubectl logs' flags reach the service as the API's
// options, and the combinations that cannot work are refused before any
// request.
func TestPodLogsFlags(t *testing.T) {
	e := newPodEnv(t)
	var mu sync.Mutex // the server's goroutine writes got, the test reads it
	var got api.LogOptions
	e.fake.LogsFunc = func(_ context.Context, _, _ string, opts api.LogOptions, w io.Writer) error {
		mu.Lock()
		got = opts
		mu.Unlock()
		_, err := io.WriteString(w, "x\n")
		return err
	}
	applyBoth(t, e)
	cases := []struct {
		name string
		args []string
		want api.LogOptions
	}{
		{"no flag is the whole log", []string{"web"}, api.LogOptions{Container: "nginx", Tail: -1}},
		{"-f, --timestamps and --tail", []string{"web", "-c", "sidecar", "-f", "--timestamps", "--tail", "5"},
			api.LogOptions{Container: "sidecar", Tail: 5, Follow: true, Timestamps: true}},
		{"-p is the previous instance", []string{"web", "-p"}, api.LogOptions{Container: "nginx", Tail: -1, Previous: true}},
		{"--since is whole seconds, rounded up", []string{"web", "--since", "1500ms"}, api.LogOptions{Container: "nginx", Tail: -1, SinceSeconds: 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if out := e.mustRun(t, "logs", tc.args...); out != "x\n" {
				t.Fatalf("got %q", out)
			}
			mu.Lock()
			defer mu.Unlock()
			if got != tc.want {
				t.Errorf("the service got %+v, want %+v", got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name, want string
		args       []string
	}{
		{"--follow with --previous is refused", "--follow and --previous", []string{"web", "-f", "-p"}},
		{"a negative --since is refused", "--since -1s", []string{"web", "--since", "-1s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := e.run(t, "", "logs", tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to name %q", err, tc.want)
			}
		})
	}
}

func TestPodExec(t *testing.T) {
	e := newPodEnv(t)
	type call struct {
		container string
		cmd       []string
		timeout   time.Duration
	}
	var mu sync.Mutex // the server's goroutine writes got, the test reads it
	var got call
	e.fake.ExecFunc = func(_ context.Context, _, _, container string, cmd []string, timeout time.Duration) (api.ExecResult, error) {
		mu.Lock()
		got = call{container, cmd, timeout}
		mu.Unlock()
		codes := map[string]int32{"false": 1, "huge": 256}
		return api.ExecResult{Stdout: []byte("out\n"), Stderr: []byte("err\n"), ExitCode: codes[cmd[0]]}, nil
	}
	applyBoth(t, e)

	t.Run("it prints stdout and stderr and passes the flags after -- to the command", func(t *testing.T) {
		out, stderr, err := e.run(t, "", "exec", "web", "-c", "sidecar", "--timeout", "3s", "--", "ls", "-l", "/")
		if err != nil || out != "out\n" || stderr != "err\n" {
			t.Fatalf("got %q %q %v", out, stderr, err)
		}
		want := call{"sidecar", []string{"ls", "-l", "/"}, 3 * time.Second}
		mu.Lock()
		defer mu.Unlock()
		if got.container != want.container || strings.Join(got.cmd, " ") != "ls -l /" || got.timeout != want.timeout {
			t.Fatalf("the service got %+v, want %+v", got, want)
		}
	})

	cases := []struct {
		name string
		cmd  string
		code int
		msg  string
	}{
		{"a failing command exits with its code", "false", 1, "command terminated with exit code 1"},
		{"a code that does not fit an exit status exits 255", "huge", 255, "command terminated with exit code 256"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := e.run(t, "", "exec", "web", "--", tc.cmd)
			ee, ok := errors.AsType[*exitError](err)
			if !ok || ee.code != tc.code || ee.msg != tc.msg {
				t.Fatalf("got %v (%T)", err, err)
			}
		})
	}

	t.Run("a command line without -- is refused with the usage", func(t *testing.T) {
		if _, _, err := e.run(t, "", "exec", "web", "ls"); err == nil || err.Error() != execUsage {
			t.Fatalf("got %v", err)
		}
	})
}

func TestPodStatusColumnsFollowKubectl(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	waiting := func(r string) corev1.ContainerState {
		return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: r}}
	}
	terminated := func(reason string, code, sig int32) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: reason, ExitCode: code, Signal: sig}}
	}
	readyCond := []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	cases := []struct {
		name      string
		status    corev1.PodStatus
		inits     int
		deleting  bool
		wantReady int
		want      string
		restarts  string
	}{
		{"a pod whose containers run is Running", corev1.PodStatus{Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{{Ready: true, State: running}}}, 0, false, 1, "Running", "0"},
		{"a pod without statuses shows its phase", corev1.PodStatus{Phase: corev1.PodPending}, 0, false, 0, "Pending", "0"},
		{"a pod reason wins over the phase", corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"}, 0, false, 0, "Evicted", "0"},
		{"a crash-looping container shows its reason and when it last restarted", corev1.PodStatus{Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{{State: waiting("CrashLoopBackOff"), RestartCount: 3,
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{FinishedAt: ago(5 * time.Minute)}}}}},
			0, false, 0, "CrashLoopBackOff", "3 (5m ago)"},
		{"a container killed by a signal without a reason shows the signal", corev1.PodStatus{Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{{State: terminated("", 137, 9)}}}, 0, false, 0, "Signal:9", "0"},
		{"a container that exited without a reason shows the code", corev1.PodStatus{Phase: corev1.PodFailed,
			ContainerStatuses: []corev1.ContainerStatus{{State: terminated("", 2, 0)}}}, 0, false, 0, "ExitCode:2", "0"},
		{"a completed container beside a running ready one reads Running", corev1.PodStatus{Phase: corev1.PodRunning, Conditions: readyCond,
			ContainerStatuses: []corev1.ContainerStatus{{Ready: true, State: running}, {State: terminated("Completed", 0, 0)}}},
			0, false, 1, "Running", "0"},
		{"the same pod without the Ready condition reads NotReady", corev1.PodStatus{Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{{Ready: true, State: running}, {State: terminated("Completed", 0, 0)}}},
			0, false, 1, "NotReady", "0"},
		{"a running init container shows the init step", corev1.PodStatus{Phase: corev1.PodPending,
			InitContainerStatuses: []corev1.ContainerStatus{{State: terminated("Completed", 0, 0)}, {State: running, RestartCount: 1}},
			ContainerStatuses:     []corev1.ContainerStatus{{State: waiting("PodInitializing")}}}, 2, false, 0, "Init:1/2", "1"},
		{"a failed init container shows its exit code", corev1.PodStatus{Phase: corev1.PodPending,
			InitContainerStatuses: []corev1.ContainerStatus{{State: terminated("", 1, 0)}}}, 1, false, 0, "Init:ExitCode:1", "0"},
		{"a waiting init container shows its reason", corev1.PodStatus{Phase: corev1.PodPending,
			InitContainerStatuses: []corev1.ContainerStatus{{State: waiting("ErrImagePull")}}}, 1, false, 0, "Init:ErrImagePull", "0"},
		{"a deleted pod is Terminating", corev1.PodStatus{Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{{Ready: true, State: running}}}, 0, true, 1, "Terminating", "0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{Status: tc.status}
			p.Spec.InitContainers = make([]corev1.Container, tc.inits)
			if tc.deleting {
				ts := ago(time.Second)
				p.DeletionTimestamp = &ts
			}
			r := podRow(p, now)
			if r.ready != tc.wantReady || r.status != tc.want || r.restarts != tc.restarts {
				t.Fatalf("got ready %d status %q restarts %q, want %d %q %q", r.ready, r.status, r.restarts, tc.wantReady, tc.want, tc.restarts)
			}
		})
	}
}

func TestPodCommandsExplainAMissingSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "api.sock")
	e := &podEnv{path: path, now: time.Now()}
	_, _, err := e.run(t, "", "ls")
	want := "nodeguard API socket " + path + ": no such file (is `nodeguard run` running? --api-socket)"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
}

func TestPodIsWiredIntoTheRoot(t *testing.T) {
	e := newPodEnv(t)
	applyBoth(t, e)
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"pod", "ls", "-o", "json", "--api-socket", e.path})
	if err := root.ExecuteContext(t.Context()); err != nil {
		t.Fatal(err)
	}
	var l corev1.PodList
	if err := json.Unmarshal(out.Bytes(), &l); err != nil || len(l.Items) != 2 {
		t.Fatalf("got %v items, %v", len(l.Items), err)
	}
}

// TestPodColumnsCountSidecars: kubectl's READY counts sidecars next to the
// app containers, and once the pod is initialized RESTARTS is the
// sidecars' and app containers' (a finished init container's no longer).
func TestPodColumnsCountSidecars(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	always := corev1.ContainerRestartPolicyAlways
	yes := true
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	completed := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed"}}
	lastExit := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{FinishedAt: metav1.NewTime(now.Add(-time.Minute))}}
	initialized := []corev1.PodCondition{{Type: corev1.PodInitialized, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	spec := corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "proxy", RestartPolicy: &always}, {Name: "setup"}},
		Containers:     []corev1.Container{{Name: "app"}},
	}
	cases := []struct {
		name          string
		status        corev1.PodStatus
		ready         int
		want, restart string
	}{
		{"while the next init container runs, a started sidecar is ready and counted", corev1.PodStatus{Phase: corev1.PodPending,
			InitContainerStatuses: []corev1.ContainerStatus{
				{Name: "proxy", State: running, Started: &yes, Ready: true},
				{Name: "setup", State: running, RestartCount: 1}}},
			1, "Init:1/2", "1"},
		{"an initialized pod counts the sidecar's restarts and not the init container's", corev1.PodStatus{Phase: corev1.PodRunning, Conditions: initialized,
			InitContainerStatuses: []corev1.ContainerStatus{
				{Name: "proxy", State: running, Started: &yes, Ready: true, RestartCount: 2, LastTerminationState: lastExit},
				{Name: "setup", State: completed, RestartCount: 3}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", State: running, Ready: true}}},
			2, "Running", "2 (60s ago)"},
		{"a sidecar crash-looping after initialization shows, and the app still counts", corev1.PodStatus{Phase: corev1.PodRunning, Conditions: initialized,
			InitContainerStatuses: []corev1.ContainerStatus{
				{Name: "proxy", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}, RestartCount: 4},
				{Name: "setup", State: completed}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", State: running, Ready: true}}},
			1, "Init:CrashLoopBackOff", "4"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := podRow(&corev1.Pod{Spec: spec, Status: tc.status}, now)
			if r.ready != tc.ready || r.total != 2 || r.status != tc.want || r.restarts != tc.restart {
				t.Fatalf("got %d/%d %q restarts %q, want %d/2 %q %q", r.ready, r.total, r.status, r.restarts, tc.ready, tc.want, tc.restart)
			}
		})
	}
}

func TestPodStreamingCommandLines(t *testing.T) {
	e := newPodEnv(t)
	applyBoth(t, e)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"exec -i with --timeout is refused: a session runs until it ends", []string{"exec", "-i", "web", "--timeout", "3s", "--", "cat"}, "--timeout with -i or -t"},
		{"exec -it without -- is refused with the usage", []string{"exec", "-it", "web", "sh"}, execUsage},
		{"port-forward without ports is refused with the usage", []string{"port-forward", "web"}, portForwardUsage},
		{"a named remote port is refused: nodeguard forwards numbers", []string{"port-forward", "web", "8080:http"}, `REMOTE "http": want a port number between 1 and 65535`},
		{"remote port 0 is refused", []string{"port-forward", "web", "0"}, `REMOTE "0"`},
		{"a local port above 65535 is refused", []string{"port-forward", "web", "70000:80"}, `LOCAL "70000"`},
		{"attach takes one pod", []string{"attach", "web", "db"}, "accepts 1 arg(s)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := e.run(t, "", tc.args[0], tc.args[1:]...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}

	t.Run("a session the agent cannot serve reaches the CLI as the agent's error", func(t *testing.T) {
		// The fake has no streaming server: its refusal comes back
		// through the upgrade, whole.
		_, _, err := e.run(t, "", "attach", "web", "-c", "sidecar")
		if err == nil || !strings.Contains(err.Error(), "attach of pod default/web: the fake pod service has no streaming server") {
			t.Fatalf("got %v", err)
		}
		_, _, err = e.run(t, "", "exec", "-i", "nope", "--", "cat")
		if !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("exec -i in a missing pod: %v, want ErrNotFound", err)
		}
	})
}
