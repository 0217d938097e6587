package staticpods

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/filesource"
)

const (
	ready    = runtimeapi.PodSandboxState_SANDBOX_READY
	notReady = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	created  = runtimeapi.ContainerState_CONTAINER_CREATED
	running  = runtimeapi.ContainerState_CONTAINER_RUNNING
	exited   = runtimeapi.ContainerState_CONTAINER_EXITED
)

// t0 is the fake clock's start; runtime times are given relative to it.
var t0 = time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)

func at(d time.Duration) int64 { return t0.Add(d).UnixNano() }

// podYAML is a static pod of namespace bench with the containers named
// (sleeping busybox), and extra lines under spec.
func podYAML(name string, containers []string, spec string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Pod\nmetadata: {name: %s, namespace: bench}\nspec:\n%s  containers:\n", name, spec)
	for _, c := range containers {
		fmt.Fprintf(&b, "  - name: %s\n    image: busybox:1\n    command: [sleep, \"3600\"]\n", c)
	}
	return []byte(b.String())
}

// fixture is a Client on a temporary directory and a fake runtime, with
// a clock the test moves.
type fixture struct {
	t   *testing.T
	dir string
	rt  *fakeRuntime
	c   *Client
	mu  sync.Mutex
	now time.Time
}

func newFixture(t *testing.T, opts ...Option) *fixture {
	f := &fixture{t: t, dir: t.TempDir(), rt: newFakeRuntime(), now: t0.Add(time.Hour)}
	opts = append([]Option{WithNodeName("Node-1"), WithClock(f.clock)}, opts...)
	c, err := New(f.dir, f.rt, opts...)
	if err != nil {
		t.Fatal(err)
	}
	f.c = c
	return f
}

func (f *fixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fixture) setClock(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = t
}

func (f *fixture) apply(name string, containers []string, spec string) {
	f.t.Helper()
	if _, err := f.c.Apply(f.t.Context(), podYAML(name, containers, spec), "test/"+name); err != nil {
		f.t.Fatalf("apply %s: %v", name, err)
	}
}

// get is the pod, or nil when Get says it is gone.
func (f *fixture) get(name string) *corev1.Pod {
	f.t.Helper()
	p, err := f.c.Get(f.t.Context(), "bench", name)
	if errors.Is(err, api.ErrNotFound) {
		return nil
	}
	if err != nil {
		f.t.Fatalf("get %s: %v", name, err)
	}
	return p
}

// list is the pods' names mapped to their phases.
func (f *fixture) list() map[string]corev1.PodPhase {
	f.t.Helper()
	l, err := f.c.List(f.t.Context())
	if err != nil {
		f.t.Fatalf("list: %v", err)
	}
	out := map[string]corev1.PodPhase{}
	for _, p := range l.Items {
		out[p.Namespace+"/"+p.Name] = p.Status.Phase
	}
	return out
}

func TestApplyWritesOneFilePerPodUnderItsNamespaceAndName(t *testing.T) {
	f := newFixture(t)
	m := podYAML("web", []string{"main"}, "")
	l, err := f.c.Apply(t.Context(), m, "test/web")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(f.dir, "bench_web.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != string(m) {
		t.Errorf("the file holds %q, want the manifest as given %q", b, m)
	}
	entries, err := os.ReadDir(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("the directory holds %d entries, want the manifest alone (no temporary file left)", len(entries))
	}
	if len(l.Items) != 1 {
		t.Fatalf("Apply returned %d pods, want 1", len(l.Items))
	}
	p := l.Items[0]
	if p.Namespace != "bench" || p.Name != "web" || p.UID != "" || p.Status.Phase != "" {
		t.Errorf("Apply returned %s/%s uid %q phase %q, want bench/web as parsed, without UID or status", p.Namespace, p.Name, p.UID, p.Status.Phase)
	}
	if p.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		t.Errorf("restartPolicy %q: the defaults were not applied", p.Spec.RestartPolicy)
	}

	// Applying again replaces the file.
	m2 := podYAML("web", []string{"main", "side"}, "")
	if _, err := f.c.Apply(t.Context(), m2, "test/web"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(f.dir, "bench_web.yaml")); string(b) != string(m2) {
		t.Errorf("after a second Apply the file holds %q, want %q", b, m2)
	}
}

func TestApplyRefusesWhatIsNotExactlyOneValidPod(t *testing.T) {
	for _, tc := range []struct {
		name, manifest string
	}{
		{"two pods in one manifest", string(podYAML("a", []string{"main"}, "")) + "---\n" + string(podYAML("b", []string{"main"}, ""))},
		{"YAML that does not parse", "apiVersion: v1\nkind: Pod\nmetadata: {name: [\n"},
		{"an unknown field", "apiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: bench}\nspec: {containerz: []}\n"},
		{"no pod at all", "# nothing\n"},
		{"a name with an underscore", "apiVersion: v1\nkind: Pod\nmetadata: {name: a_b, namespace: bench}\nspec: {containers: [{name: main, image: busybox:1}]}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			_, err := f.c.Apply(t.Context(), []byte(tc.manifest), "test")
			if !errors.Is(err, api.ErrInvalid) {
				t.Errorf("Apply: %v, want an error wrapping api.ErrInvalid", err)
			}
			if entries, _ := os.ReadDir(f.dir); len(entries) != 0 {
				t.Errorf("the directory holds %d entries after a refused Apply, want none", len(entries))
			}
		})
	}
}

// recordingPods is nodeguard's pod manager as its file source sees it,
// recording what it is given.
type recordingPods struct {
	mu      sync.Mutex
	applied []string
}

func (r *recordingPods) Apply(_ context.Context, pods []*corev1.Pod, source string) ([]*corev1.Pod, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applied = append(r.applied, source)
	return pods, nil
}
func (r *recordingPods) List() []*corev1.Pod                        { return nil }
func (r *recordingPods) Forget(string, map[types.UID]bool)          {}
func (r *recordingPods) SourceUnavailable(source string, err error) {}

// A manifest half written is in a temporary file that neither agent
// reads: nodeguard's file source is run on it here; the kubelet's reads
// only names matching "[^.]*" (pkg/kubelet/config), which the name is
// checked against.
func TestAManifestBeingWrittenIsReadByNeitherAgent(t *testing.T) {
	dir := t.TempDir()
	tmp, err := os.CreateTemp(dir, tempPattern("bench_web.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmp.Write(podYAML("web", []string{"main"}, "")); err != nil {
		t.Fatal(err)
	}
	tmp.Close()
	if base := filepath.Base(tmp.Name()); !strings.HasPrefix(base, ".") {
		t.Errorf("temporary file %s does not start with a dot: the kubelet would read it", base)
	}
	if ok, _ := filepath.Match("[^.]*", filepath.Base(tmp.Name())); ok {
		t.Errorf("temporary file %s matches the kubelet's glob", tmp.Name())
	}
	rec := &recordingPods{}
	if err := filesource.New(filesource.Config{Dir: dir, Pods: rec}).Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(rec.applied) != 0 {
		t.Errorf("nodeguard's file source applied %v from a temporary file", rec.applied)
	}

	// The finished file is read: the check above is not vacuous.
	if err := writeAtomic(filepath.Join(dir, "bench_web.yaml"), podYAML("web", []string{"main"}, "")); err != nil {
		t.Fatal(err)
	}
	if err := filesource.New(filesource.Config{Dir: dir, Pods: rec}).Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(rec.applied) != 1 || !strings.HasSuffix(rec.applied[0], "bench_web.yaml") {
		t.Errorf("nodeguard's file source applied %v, want the finished bench_web.yaml", rec.applied)
	}
}

func TestTheAgentsNamesMapBackToTheManifests(t *testing.T) {
	for _, tc := range []struct {
		name      string
		manifests []string
		runtime   string // the pod name as the agent gave it
		want      string // the name the pod is reported under
	}{
		{"the kubelet's -<nodeName> suffix is stripped", []string{"web"}, "web-node-1", "web"},
		{"nodeguard's own name is kept", []string{"web"}, "web", "web"},
		{"an exact name wins over a stripped one", []string{"web", "web-node-1"}, "web-node-1", "web-node-1"},
		{"a name is not stripped when no manifest has the rest", []string{"web"}, "other-node-1", "other-node-1"},
		{"another node's suffix is not stripped", []string{"web"}, "web-node-2", "web-node-2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			for _, m := range tc.manifests {
				f.apply(m, []string{"main"}, "")
			}
			f.rt.addSandbox("sb", "bench", tc.runtime, ready, at(0))
			f.rt.addContainer("c", "sb", "bench", tc.runtime, "main", running, at(time.Second), at(2*time.Second), 0)
			got := f.list()
			if got["bench/"+tc.want] != corev1.PodRunning {
				t.Errorf("List: %v, want bench/%s Running", got, tc.want)
			}
			if p := f.get(tc.want); p == nil || p.Status.Phase != corev1.PodRunning {
				t.Errorf("Get(%s) = %v, want it Running", tc.want, p)
			}
		})
	}
}

// Every phase rule with a manifest of two containers, main and side.
func TestPhasesAsTheRuntimeShowsThem(t *testing.T) {
	type ctr struct {
		id, sb, name string
		state        runtimeapi.ContainerState
		exit         int32
	}
	type sandbox struct {
		id      string
		state   runtimeapi.PodSandboxState
		created time.Duration
	}
	for _, tc := range []struct {
		name       string
		spec       string
		sandboxes  []sandbox
		containers []ctr
		want       corev1.PodPhase
		wantStates []string // each container's state: waiting reason, "running", or "exit N"
	}{
		{name: "a file with nothing in the runtime is Pending",
			want: corev1.PodPending, wantStates: []string{"ContainerCreating", "ContainerCreating"}},
		{name: "a ready sandbox with one container running and one created is Pending",
			sandboxes:  []sandbox{{"sb", ready, 0}},
			containers: []ctr{{"c1", "sb", "main", running, 0}, {"c2", "sb", "side", created, 0}},
			want:       corev1.PodPending, wantStates: []string{"running", "ContainerCreating"}},
		{name: "a ready sandbox with every container running is Running",
			sandboxes:  []sandbox{{"sb", ready, 0}},
			containers: []ctr{{"c1", "sb", "main", running, 0}, {"c2", "sb", "side", running, 0}},
			want:       corev1.PodRunning, wantStates: []string{"running", "running"}},
		{name: "containers running in a sandbox that is no longer ready are not Running",
			sandboxes:  []sandbox{{"sb", notReady, 0}},
			containers: []ctr{{"c1", "sb", "main", running, 0}, {"c2", "sb", "side", running, 0}},
			want:       corev1.PodPending, wantStates: []string{"running", "running"}},
		{name: "the newest sandbox counts: an older one running everything does not make it Running",
			sandboxes: []sandbox{{"old", ready, 0}, {"new", ready, time.Minute}},
			containers: []ctr{{"o1", "old", "main", running, 0}, {"o2", "old", "side", running, 0},
				{"n1", "new", "main", running, 0}},
			want: corev1.PodPending, wantStates: []string{"running", "ContainerCreating"}},
		{name: "a stopped older sandbox does not hold back a newer one running everything",
			sandboxes: []sandbox{{"old", notReady, 0}, {"new", ready, time.Minute}},
			containers: []ctr{{"o1", "old", "main", exited, 137},
				{"n1", "new", "main", running, 0}, {"n2", "new", "side", running, 0}},
			want: corev1.PodRunning, wantStates: []string{"running", "running"}},
		{name: "restartPolicy Never with every container exited 0 is Succeeded",
			spec:       "  restartPolicy: Never\n",
			sandboxes:  []sandbox{{"sb", notReady, 0}},
			containers: []ctr{{"c1", "sb", "main", exited, 0}, {"c2", "sb", "side", exited, 0}},
			want:       corev1.PodSucceeded, wantStates: []string{"exit 0", "exit 0"}},
		{name: "restartPolicy Never with a container exited 1 is Failed",
			spec:       "  restartPolicy: Never\n",
			sandboxes:  []sandbox{{"sb", notReady, 0}},
			containers: []ctr{{"c1", "sb", "main", exited, 0}, {"c2", "sb", "side", exited, 1}},
			want:       corev1.PodFailed, wantStates: []string{"exit 0", "exit 1"}},
		{name: "restartPolicy OnFailure with a container exited 1 is Pending (it restarts)",
			spec:       "  restartPolicy: OnFailure\n",
			sandboxes:  []sandbox{{"sb", ready, 0}},
			containers: []ctr{{"c1", "sb", "main", exited, 0}, {"c2", "sb", "side", exited, 1}},
			want:       corev1.PodPending, wantStates: []string{"exit 0", "exit 1"}},
		{name: "restartPolicy Always with every container exited is Pending (they restart)",
			sandboxes:  []sandbox{{"sb", ready, 0}},
			containers: []ctr{{"c1", "sb", "main", exited, 0}, {"c2", "sb", "side", exited, 0}},
			want:       corev1.PodPending, wantStates: []string{"exit 0", "exit 0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.apply("web", []string{"main", "side"}, tc.spec)
			for _, sb := range tc.sandboxes {
				f.rt.addSandbox(sb.id, "bench", "web-node-1", sb.state, at(sb.created))
			}
			for _, c := range tc.containers {
				f.rt.addContainer(c.id, c.sb, "bench", "web-node-1", c.name, c.state, at(2*time.Minute), at(2*time.Minute+time.Second), c.exit)
			}
			p := f.get("web")
			if p == nil {
				t.Fatal("Get: not found, want the pod (its file exists)")
			}
			if p.Status.Phase != tc.want {
				t.Errorf("Get: phase %s, want %s", p.Status.Phase, tc.want)
			}
			var states []string
			for _, cs := range p.Status.ContainerStatuses {
				switch {
				case cs.State.Running != nil:
					states = append(states, "running")
				case cs.State.Terminated != nil:
					states = append(states, fmt.Sprintf("exit %d", cs.State.Terminated.ExitCode))
				case cs.State.Waiting != nil:
					states = append(states, cs.State.Waiting.Reason)
				}
			}
			if !slices.Equal(states, tc.wantStates) {
				t.Errorf("container states %v, want %v", states, tc.wantStates)
			}
			if got := f.list()["bench/web"]; got != tc.want {
				t.Errorf("List: phase %s, want %s as Get", got, tc.want)
			}
		})
	}
}

// The times churn measures by: the pod's creation is its newest sandbox's
// created_at, and a running container's startedAt is the runtime's
// started_at (not its created_at).
func TestTimesAreTheRuntimes(t *testing.T) {
	f := newFixture(t)
	f.apply("web", []string{"main"}, "")
	f.rt.addSandbox("old", "bench", "web", notReady, at(0))
	f.rt.addSandbox("sb", "bench", "web", ready, at(time.Minute))
	f.rt.addContainer("c", "sb", "bench", "web", "main", running, at(time.Minute+100*time.Millisecond), at(time.Minute+700*time.Millisecond), 0)
	p := f.get("web")
	if p == nil || p.Status.Phase != corev1.PodRunning {
		t.Fatalf("Get: %v, want the pod Running", p)
	}
	if want := t0.Add(time.Minute); !p.CreationTimestamp.Time.Equal(want) {
		t.Errorf("creation %s, want the newest sandbox's created_at %s", p.CreationTimestamp.Time, want)
	}
	if p.UID != "uid-sb" {
		t.Errorf("UID %q, want the newest sandbox's uid-sb", p.UID)
	}
	started := p.Status.ContainerStatuses[0].State.Running.StartedAt.Time
	if want := t0.Add(time.Minute + 700*time.Millisecond); !started.Equal(want) {
		t.Errorf("startedAt %s, want the runtime's started_at %s", started, want)
	}
}

// After Delete, a pod is there while a sandbox of it is ready or a
// container of it runs, and gone once neither holds, stopped sandboxes
// and exited containers still listed or not.
func TestAfterDeleteAPodIsGoneOnceNothingOfItRuns(t *testing.T) {
	for _, tc := range []struct {
		name    string
		runtime string // the agent's name for the pod
		steps   []func(rt *fakeRuntime)
		present []bool // after each step (the first: right after Delete)
	}{
		{name: "the kubelet stops the sandbox after its containers, and removes it later", runtime: "web-node-1",
			steps: []func(rt *fakeRuntime){
				func(*fakeRuntime) {},
				func(rt *fakeRuntime) { rt.setContainer("c", exited, 137) },
				func(rt *fakeRuntime) { rt.setSandbox("sb", notReady) },
				func(rt *fakeRuntime) { rt.removeAll() },
			},
			present: []bool{true, true, false, false}},
		{name: "a container still running in a stopped sandbox keeps the pod", runtime: "web",
			steps: []func(rt *fakeRuntime){
				func(rt *fakeRuntime) { rt.setSandbox("sb", notReady) },
				func(rt *fakeRuntime) { rt.setContainer("c", exited, 0) },
			},
			present: []bool{true, false}},
		{name: "a pod the runtime already let go of is gone at once", runtime: "web",
			steps: []func(rt *fakeRuntime){
				func(rt *fakeRuntime) { rt.setContainer("c", exited, 0); rt.setSandbox("sb", notReady) },
			},
			present: []bool{false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.apply("web", []string{"main"}, "")
			f.rt.addSandbox("sb", "bench", tc.runtime, ready, at(0))
			f.rt.addContainer("c", "sb", "bench", tc.runtime, "main", running, at(time.Second), at(2*time.Second), 0)
			if p := f.get("web"); p == nil || p.Status.Phase != corev1.PodRunning {
				t.Fatalf("before Delete: %v, want the pod Running", p)
			}
			// Learn the naming from a List first, as the benchmarks' fill
			// does, so that Get asks for this pod's label alone.
			f.list()
			deletedAt := t0.Add(2 * time.Hour)
			f.setClock(deletedAt)
			if err := f.c.Delete(t.Context(), "bench", "web"); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if _, err := os.Stat(filepath.Join(f.dir, "bench_web.yaml")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the file after Delete: %v, want it gone", err)
			}
			for i, step := range tc.steps {
				step(f.rt)
				p := f.get("web")
				_, listed := f.list()["bench/web"]
				if (p != nil) != tc.present[i] || listed != tc.present[i] {
					t.Errorf("step %d: Get found it %t, List has it %t; want %t", i, p != nil, listed, tc.present[i])
				}
				if p != nil && (p.DeletionTimestamp == nil || !p.DeletionTimestamp.Time.Equal(deletedAt)) {
					t.Errorf("step %d: deletionTimestamp %v, want %s (when Delete removed the file)", i, p.DeletionTimestamp, deletedAt)
				}
				err := f.c.Delete(t.Context(), "bench", "web")
				switch {
				case tc.present[i] && err != nil:
					t.Errorf("step %d: Delete of the terminating pod: %v, want nil (as the API answers)", i, err)
				case !tc.present[i] && !errors.Is(err, api.ErrNotFound):
					t.Errorf("step %d: Delete of the gone pod: %v, want api.ErrNotFound", i, err)
				}
			}
		})
	}
}

func TestDeleteOfAPodNeverAppliedIsNotFound(t *testing.T) {
	f := newFixture(t)
	if err := f.c.Delete(t.Context(), "bench", "nope"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("Delete: %v, want api.ErrNotFound", err)
	}
	if _, err := f.c.Get(t.Context(), "bench", "nope"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("Get: %v, want api.ErrNotFound", err)
	}
	if _, err := f.c.Get(t.Context(), "bench", "Not_A_Name"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("Get of an invalid name: %v, want api.ErrNotFound", err)
	}
}

// A manifest file put in the directory by someone else (or left by an
// earlier run) is the Client's too: listed Pending, its kubelet name
// mapped back, and deleted by name.
func TestAFileFoundInTheDirectoryIsAPod(t *testing.T) {
	f := newFixture(t)
	if err := os.WriteFile(filepath.Join(f.dir, "bench_web.yaml"), podYAML("web", []string{"main"}, ""), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.dir, "notes.txt"), []byte("not a pod"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := f.list(); len(got) != 1 || got["bench/web"] != corev1.PodPending {
		t.Errorf("List: %v, want bench/web Pending alone", got)
	}
	f.rt.addSandbox("sb", "bench", "web-node-1", ready, at(0))
	f.rt.addContainer("c", "sb", "bench", "web-node-1", "main", running, at(time.Second), at(2*time.Second), 0)
	if got := f.list(); got["bench/web"] != corev1.PodRunning {
		t.Errorf("List: %v, want bench/web Running", got)
	}
	if err := f.c.Delete(t.Context(), "bench", "web"); err != nil {
		t.Fatal(err)
	}
	if p := f.get("web"); p == nil {
		t.Error("Get after Delete: gone while its kubelet-named sandbox is still ready")
	}
}

func TestABrokenFileInTheDirectoryIsPendingWithWhy(t *testing.T) {
	f := newFixture(t)
	if err := os.WriteFile(filepath.Join(f.dir, "bench_web.yaml"), []byte("kind: Pod\nspec: {containerz: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := f.get("web")
	if p == nil || p.Status.Phase != corev1.PodPending || !strings.Contains(p.Status.Message, "containerz") {
		t.Errorf("Get: %+v, want Pending with the parse error as its message", p)
	}
}

// Readiness is not in the runtime: a probed container is ready once it
// has run for the probe's initial delay and one period.
func TestAProbedContainerIsReadyAfterItsFirstProbe(t *testing.T) {
	f := newFixture(t)
	f.apply("web", []string{"main"}, "")
	m := strings.Replace(string(podYAML("probed", []string{"main"}, "")), "    command:",
		"    readinessProbe: {exec: {command: [\"true\"]}, initialDelaySeconds: 5, periodSeconds: 10}\n    command:", 1)
	if _, err := f.c.Apply(t.Context(), []byte(m), "test/probed"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"web", "probed"} {
		f.rt.addSandbox("sb-"+name, "bench", name, ready, at(0))
		f.rt.addContainer("c-"+name, "sb-"+name, "bench", name, "main", running, at(time.Second), at(2*time.Second), 0)
	}
	readyOf := func(p *corev1.Pod) (bool, string) {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.ContainersReady {
				return c.Status == corev1.ConditionTrue, c.Reason
			}
		}
		t.Fatalf("%s: no ContainersReady condition", p.Name)
		return false, ""
	}
	for _, tc := range []struct {
		after       time.Duration // since the container started
		name        string
		wantReady   bool
		wantReason  string
		wantRunning bool
	}{
		{14 * time.Second, "web", true, "", true},
		{14 * time.Second, "probed", false, reasonNotReady, true},
		{15 * time.Second, "probed", true, ReasonReadinessInferred, true},
	} {
		f.setClock(t0.Add(2*time.Second + tc.after))
		p := f.get(tc.name)
		ready, reason := readyOf(p)
		if ready != tc.wantReady || reason != tc.wantReason || (p.Status.Phase == corev1.PodRunning) != tc.wantRunning {
			t.Errorf("%s %s after its start: ready %t (%q), phase %s; want ready %t (%q), Running", tc.name, tc.after, ready, reason, p.Status.Phase, tc.wantReady, tc.wantReason)
		}
	}
}

// The cost the benchmarks' wait loops put on the runtime: one
// ListPodSandbox and one ListContainers per List or Get, a
// ContainerStatus once per container and state, and, once the agent's
// naming is known, a Get asks for one pod's labels.
func TestListAndGetAreCheapForTheRuntime(t *testing.T) {
	const pods = 500
	f := newFixture(t)
	for i := range pods {
		name := fmt.Sprintf("idle-%d", i)
		f.apply(name, []string{"main"}, "")
		f.rt.addSandbox("sb-"+name, "bench", name+"-node-1", ready, at(0))
		f.rt.addContainer("c-"+name, "sb-"+name, "bench", name+"-node-1", "main", running, at(time.Second), at(2*time.Second), 0)
	}
	for round, wantStatus := range []int{pods, 0} {
		f.rt.resetCounts()
		got := f.list()
		if len(got) != pods {
			t.Fatalf("List %d: %d pods, want %d", round, len(got), pods)
		}
		if s, c, st := f.rt.count("ListPodSandbox"), f.rt.count("ListContainers"), f.rt.count("ContainerStatus"); s != 1 || c != 1 || st != wantStatus {
			t.Errorf("List %d: %d ListPodSandbox, %d ListContainers, %d ContainerStatus; want 1, 1, %d", round, s, c, st, wantStatus)
		}
	}
	f.rt.resetCounts()
	if p := f.get("idle-7"); p == nil || p.Status.Phase != corev1.PodRunning {
		t.Fatalf("Get: %v, want idle-7 Running", p)
	}
	if s, c, st := f.rt.count("ListPodSandbox"), f.rt.count("ListContainers"), f.rt.count("ContainerStatus"); s != 1 || c != 1 || st != 0 {
		t.Errorf("Get: %d ListPodSandbox, %d ListContainers, %d ContainerStatus; want 1, 1, 0", s, c, st)
	}
	if sel := f.rt.selectors; len(sel) != 1 || sel[0]["io.kubernetes.pod.name"] != "idle-7-node-1" {
		t.Errorf("Get asked for sandboxes by %v, want the kubelet's name of the pod idle-7-node-1", sel)
	}

	// A container that exits is read once more, for its exit code.
	f.rt.setContainer("c-idle-7", exited, 2)
	f.rt.resetCounts()
	p := f.get("idle-7")
	if st := f.rt.count("ContainerStatus"); st != 1 {
		t.Errorf("Get after the container exited: %d ContainerStatus, want 1", st)
	}
	if term := p.Status.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 2 {
		t.Errorf("container state %+v, want exited 2", p.Status.ContainerStatuses[0].State)
	}
}

// A container removed between the listing and its status read is not
// running: its pod is not Running, and nothing fails.
func TestAContainerRemovedWhileItIsReadIsNotRunning(t *testing.T) {
	f := newFixture(t)
	f.apply("web", []string{"main"}, "")
	f.rt.addSandbox("sb", "bench", "web", ready, at(0))
	f.rt.addContainer("c", "sb", "bench", "web", "main", running, at(time.Second), at(2*time.Second), 0)
	f.rt.mu.Lock()
	delete(f.rt.statuses, "c")
	f.rt.mu.Unlock()
	p := f.get("web")
	if p.Status.Phase != corev1.PodPending || p.Status.ContainerStatuses[0].State.Waiting == nil {
		t.Errorf("phase %s, state %+v; want Pending with the container waiting", p.Status.Phase, p.Status.ContainerStatuses[0].State)
	}
}

func TestNewRefusesAMissingDirectory(t *testing.T) {
	if _, err := New(filepath.Join(t.TempDir(), "nope"), newFakeRuntime()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("New: %v, want an error wrapping os.ErrNotExist", err)
	}
}
