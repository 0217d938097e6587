package lifecycle_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/internal/statestore"
	"github.com/nodeguard/nodeguard/lab/crienv"
	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/lifecycle/logs"
	"github.com/nodeguard/nodeguard/lifecycle/podspec"
	"github.com/nodeguard/nodeguard/mounts"
)

type rig struct {
	env    *crienv.Env
	client *cri.Client
	cg     *kubepods.Cgroups
	layout *cgroups.Layout
	root   string
	// hostDir is the one hostPath prefix allowed; sources holds the
	// configMaps and secrets.
	hostDir, sources string
	// logs, when set, gets the manager's log lines as well as stderr.
	logs io.Writer
	// backoffInitial and backoffMax, when set, replace the tests' short
	// restart back-off.
	backoffInitial, backoffMax time.Duration
	// runtime, when set, wraps the CRI client the manager is given;
	// workers, when set, is its Config.Workers.
	runtime func(lifecycle.Runtime) lifecycle.Runtime
	workers int
	// containerLogs and logInterval, when set, are the manager's log
	// rotation.
	containerLogs logs.Policy
	logInterval   time.Duration
	// node is the manager's Config.Node.
	node cri.NodeInfo
	// resync and steadyResync, when set, replace the tests' short
	// Config.Resync (200 ms) and SteadyResync (3 s).
	resync, steadyResync time.Duration
	// events, when set, is the manager's Config.Events.
	events lifecycle.EventRecorder
	// podOptions and imageCredentialsFile are the manager's (a node that
	// pulls: registry_integration_test.go).
	podOptions           podspec.Options
	imageCredentialsFile string
	// nodeLabels is the manager's Config.NodeLabels (this machine's when
	// nil).
	nodeLabels map[string]string
	// state is the managers' state store, opened at the first manager
	// and kept across restarts (its quarantine counter with it).
	state *statestore.Store
	// deferReady: the test calls SourcesReady itself (a source it loads
	// first).
	deferReady bool
}

func newRig(t *testing.T) *rig {
	t.Helper()
	env := crienv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := cri.Dial(ctx, env.Endpoint(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	layout, err := cgroups.Discover()
	if err != nil {
		t.Fatal(err)
	}
	cg, err := kubepods.New(t.Context(), layout, kubepods.Cgroupfs, env.CgroupParent(), kubepods.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &rig{env: env, client: client, cg: cg, layout: layout, root: t.TempDir(), hostDir: t.TempDir(), sources: t.TempDir()}
}

func (r *rig) volumes(t *testing.T) *mounts.Volumes {
	t.Helper()
	v, err := mounts.New(mounts.Config{RootDir: r.root, HostPathAllow: []string{r.hostDir}, SourceDir: r.sources, NodeMemory: 8 << 30})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func (r *rig) network() *lifecycle.Network {
	return &lifecycle.Network{Config: r.env.NetworkConfig(), NodeNetNS: r.env.NetNS(), NetNSDirs: []string{r.env.NetNSDir()}}
}

func (r *rig) manager(t *testing.T) (*lifecycle.Manager, context.CancelFunc) {
	t.Helper()
	bi, bm := 300*time.Millisecond, time.Second
	if r.backoffInitial > 0 {
		bi, bm = r.backoffInitial, r.backoffMax
	}
	resync, steady := 200*time.Millisecond, 3*time.Second
	if r.resync > 0 {
		resync, steady = r.resync, r.steadyResync
	}
	var rt lifecycle.Runtime = r.client
	if r.runtime != nil {
		rt = r.runtime(rt)
	}
	log := slog.New(slog.NewTextHandler(r.logWriter(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	if r.state == nil {
		st, err := statestore.Open(filepath.Join(r.root, lifecycle.DefaultStateSubdir), statestore.Options{Log: log})
		if err != nil {
			t.Fatal(err)
		}
		r.state = st
	}
	m, err := lifecycle.New(lifecycle.Config{
		Runtime: rt, Cgroups: r.cg, Workers: r.workers, RootDir: r.root, MemoryCapacity: 8 << 30,
		BackoffInitial: bi, BackoffMax: bm, Resync: resync, SteadyResync: steady,
		CgroupV2: r.layout.Memory.V2(), MinOOMScoreAdj: -999,
		Volumes: r.volumes(t), Network: r.network(), GCInterval: time.Hour,
		ContainerLogs: r.containerLogs, ContainerLogMonitorInterval: r.logInterval, Node: r.node, Events: r.events,
		PodOptions: r.podOptions, ImageCredentialsFile: r.imageCredentialsFile,
		NodeLabels: r.nodeLabels, State: r.state, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !r.deferReady {
		m.SourcesReady() // the persisted API pods are the only source here
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return m, stop
}

// forgetPersisted removes the record of the API pod p, as if it had been
// deleted while nodeguard was down.
func (r *rig) forgetPersisted(t *testing.T, p *corev1.Pod) {
	t.Helper()
	st := r.state
	if _, ok, err := st.Get(lifecycle.KindAPIPod, p.Namespace+"/"+p.Name); !ok || err != nil {
		t.Fatalf("no record of pod %s/%s to forget (%v)", p.Namespace, p.Name, err)
	}
	if err := st.Delete(lifecycle.KindAPIPod, p.Namespace+"/"+p.Name); err != nil {
		t.Fatal(err)
	}
}

func (r *rig) logWriter() io.Writer {
	if r.logs == nil {
		return os.Stderr
	}
	return io.MultiWriter(os.Stderr, r.logs)
}

func (r *rig) pods(t *testing.T, yaml string) []*corev1.Pod {
	t.Helper()
	yaml = strings.ReplaceAll(yaml, "BUSYBOX", r.env.BusyboxImage())
	pods, err := podspec.Parse(strings.NewReader(yaml), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return pods
}

func waitPod(t *testing.T, m *lifecycle.Manager, name string, what string, pred func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last *corev1.Pod
	err := m.Wait(ctx, "default", name, func(p *corev1.Pod, ok bool) bool {
		last = p
		return ok && pred(p)
	})
	if err != nil {
		t.Fatalf("pod %s never %s: %v; last status %+v", name, what, err, last)
	}
	return last
}

func waitGone(t *testing.T, m *lifecycle.Manager, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Wait(ctx, "default", name, func(_ *corev1.Pod, ok bool) bool { return !ok }); err != nil {
		t.Fatalf("pod %s never went away: %v", name, err)
	}
}

func running(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" }

func (r *rig) sandboxes(t *testing.T) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sbs, err := r.client.ListPodSandbox(ctx, map[string]string{cri.ManagedLabel: "true"})
	if err != nil {
		t.Fatal(err)
	}
	return len(sbs)
}

const webPod = `
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  terminationGracePeriodSeconds: 2
  initContainers:
  - {name: init, image: BUSYBOX, command: [sh, -c, "echo init done"]}
  containers:
  - name: main
    image: BUSYBOX
    command: [sh, -c, "echo started; exec sleep 3600"]
    resources:
      requests: {memory: 64Mi}
`

func TestPodLifecycleAgainstARealContainerd(t *testing.T) {
	r := newRig(t)
	m, stop := r.manager(t)
	ctx := context.Background()

	start := time.Now()
	if _, err := m.Apply(ctx, r.pods(t, webPod), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, m, "web", "ran", running)
	t.Logf("apply -> Running in %v, IP %s", time.Since(start), p.Status.PodIP)
	if got := p.Status.InitContainerStatuses[0].State.Terminated; got == nil || got.Reason != "Completed" {
		t.Errorf("init container state %+v, want Completed", p.Status.InitContainerStatuses[0].State)
	}
	if p.Status.QOSClass != corev1.PodQOSBurstable {
		t.Errorf("QoS %s, want Burstable", p.Status.QOSClass)
	}

	var logs bytes.Buffer
	if err := m.Logs(ctx, "default", "web", lifecycle.LogOptions{Container: "main", Tail: -1}, &logs); err != nil || !strings.Contains(logs.String(), "started") {
		t.Errorf("logs %q, %v", logs.String(), err)
	}
	res, err := m.Exec(ctx, "default", "web", "", []string{"cat", "/proc/1/oom_score_adj"}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Burstable: 1000 - 1000*64Mi/8Gi = 993 (the kubelet's policy).
	if got := strings.TrimSpace(string(res.Stdout)); got != "993" {
		t.Errorf("oom_score_adj of the container is %q, want 993", got)
	}

	// The container lives beneath the pod's cgroup in the memory hierarchy.
	parent, err := r.cg.Parent(p)
	if err != nil {
		t.Fatal(err)
	}
	dirs, err := r.cg.Dirs(parent)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if d.Hierarchy.ID != r.layout.Memory.ID {
			continue
		}
		entries, err := os.ReadDir(d.Path)
		if err != nil {
			t.Fatalf("pod memory cgroup: %v", err)
		}
		subdirs := 0
		for _, e := range entries {
			if e.IsDir() {
				subdirs++
			}
		}
		if subdirs < 2 { // pause + main
			t.Errorf("pod cgroup %s has %d container cgroups, want pause and main", d.Path, subdirs)
		}
	}

	// nodeguard restarts: a new manager reloads the API pod it persisted
	// and adopts the sandbox, no duplicate.
	stop()
	m2, _ := r.manager(t)
	p2 := waitPod(t, m2, "web", "was adopted", running)
	if p2.Status.ContainerStatuses[0].ContainerID != p.Status.ContainerStatuses[0].ContainerID {
		t.Errorf("container replaced on restart: %s -> %s", p.Status.ContainerStatuses[0].ContainerID, p2.Status.ContainerStatuses[0].ContainerID)
	}
	if n := r.sandboxes(t); n != 1 {
		t.Errorf("%d sandboxes after restart, want 1", n)
	}

	if err := m2.Delete(ctx, "default", "web"); err != nil {
		t.Fatal(err)
	}
	waitGone(t, m2, "web")
}

// The first exit of a container is restarted at once and the next one
// after backoffInitial, as the kubelet does: the back-off is for a
// container that keeps failing, not for one that failed once (or whose
// start was cut short by a nodeguard killed mid-call).
func TestTheFirstRestartIsAtOnceTheNextBacksOff(t *testing.T) {
	r := newRig(t)
	r.backoffInitial, r.backoffMax = 6*time.Second, 12*time.Second
	m, _ := r.manager(t)
	ctx := context.Background()
	pods := r.pods(t, `
apiVersion: v1
kind: Pod
metadata: {name: crasher}
spec:
  containers:
  - {name: c, image: BUSYBOX, command: [sh, -c, "exit 3"]}
`)
	if _, err := m.Apply(ctx, pods, lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	restarted := func(n int32) func(*corev1.Pod) bool {
		return func(p *corev1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= n
		}
	}
	// From the first container's creation, not from the apply: the
	// sandbox's set-up (seconds on a loaded machine) is no part of the
	// restart's delay.
	waitPod(t, m, "crasher", "its first container created", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].ContainerID != ""
	})
	start := time.Now()
	waitPod(t, m, "crasher", "restarted", restarted(1))
	first := time.Since(start)
	waitPod(t, m, "crasher", "restarted twice", restarted(2))
	second := time.Since(start) - first
	t.Logf("first container created -> first restart %v; first restart -> second %v (backoffInitial %v)", first.Round(time.Millisecond), second.Round(time.Millisecond), r.backoffInitial)
	if first >= r.backoffInitial {
		t.Errorf("the first restart came %v after the first container was created: it waited for the back-off (%v)", first, r.backoffInitial)
	}
	if second < r.backoffInitial-2*time.Second {
		t.Errorf("the second restart came %v after the first: it did not wait for the back-off (%v)", second, r.backoffInitial)
	}
	if err := m.Delete(ctx, "default", "crasher"); err != nil {
		t.Fatal(err)
	}
	waitGone(t, m, "crasher")
}

// TestPodsRestartAndReportOOMKills: the hog waits 200 ms before filling
// its limit, as in the cri integration test: containerd 1.6's shim
// registers its v1 OOM eventfd only after the task started, and a hog
// OOM-killed 1 ms after start is reported as Error, not OOMKilled.
func TestPodsRestartAndReportOOMKills(t *testing.T) {
	r := newRig(t)
	m, _ := r.manager(t)
	ctx := context.Background()
	pods := r.pods(t, `
apiVersion: v1
kind: Pod
metadata: {name: crasher}
spec:
  containers:
  - {name: c, image: BUSYBOX, command: [sh, -c, "exit 3"]}
---
apiVersion: v1
kind: Pod
metadata: {name: hog}
spec:
  restartPolicy: Never
  containers:
  - name: c
    image: BUSYBOX
    command: [sh, -c, "sleep 0.2; exec tail /dev/zero"]
    resources:
      limits: {memory: 32Mi}
`)
	if _, err := m.Apply(ctx, pods, lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, m, "crasher", "restarted twice", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= 2
	})
	cs := p.Status.ContainerStatuses[0]
	t.Logf("crasher: restarts %d, state %+v", cs.RestartCount, cs.State)
	h := waitPod(t, m, "hog", "was OOM-killed", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Terminated != nil
	})
	term := h.Status.ContainerStatuses[0].State.Terminated
	if term.Reason != "OOMKilled" || term.ExitCode != 137 || h.Status.Phase != corev1.PodFailed {
		t.Errorf("hog: phase %s, terminated %+v; want Failed, OOMKilled, 137", h.Status.Phase, term)
	}
	for _, name := range []string{"crasher", "hog"} {
		if err := m.Delete(ctx, "default", name); err != nil {
			t.Fatal(err)
		}
		waitGone(t, m, name)
	}
	if n := r.sandboxes(t); n != 0 {
		t.Errorf("%d sandboxes left", n)
	}
}

func TestAPodDeletedWhileStartingLeavesNothing(t *testing.T) {
	r := newRig(t)
	m, _ := r.manager(t)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("quick%d", i)
		pods := r.pods(t, strings.ReplaceAll(webPod, "name: web", "name: "+name))
		if _, err := m.Apply(ctx, pods, lifecycle.SourceAPI); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(i*150) * time.Millisecond)
		if err := m.Delete(ctx, "default", name); err != nil {
			t.Fatal(err)
		}
		waitGone(t, m, name)
	}
	if n := r.sandboxes(t); n != 0 {
		t.Errorf("%d sandboxes left", n)
	}
	// No pod cgroup left beneath the root in any hierarchy.
	dirs, err := r.layout.Resolve(r.env.CgroupParent())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		filepath.WalkDir(d.Path, func(p string, de os.DirEntry, err error) error {
			if err == nil && de.IsDir() && strings.HasPrefix(de.Name(), "pod") {
				t.Errorf("pod cgroup left: %s", p)
			}
			return nil
		})
	}
}

func TestVolumesAreRefusedWithoutAVolumeManager(t *testing.T) {
	m, err := lifecycle.New(lifecycle.Config{Runtime: (*cri.Client)(nil), Cgroups: &kubepods.Cgroups{}, RootDir: t.TempDir(), MemoryCapacity: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := podspec.Parse(strings.NewReader(`
apiVersion: v1
kind: Pod
metadata: {name: vol}
spec:
  volumes: [{name: scratch, emptyDir: {}}]
  containers:
  - {name: c, image: busybox, volumeMounts: [{name: scratch, mountPath: /scratch}]}
`), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Apply(context.Background(), pods, lifecycle.SourceAPI)
	if !errors.Is(err, lifecycle.ErrInvalid) || !strings.Contains(err.Error(), "spec.volumes[0]") {
		t.Fatalf("got %v, want a refusal naming spec.volumes[0]", err)
	}
	if len(m.List()) != 0 {
		t.Fatal("a refused pod was kept")
	}
}

func TestBadBandwidthAnnotationIsRefusedAtApply(t *testing.T) {
	m, err := lifecycle.New(lifecycle.Config{Runtime: (*cri.Client)(nil), Cgroups: &kubepods.Cgroups{}, RootDir: t.TempDir(), MemoryCapacity: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := podspec.Parse(strings.NewReader(`
apiVersion: v1
kind: Pod
metadata: {name: bw, annotations: {kubernetes.io/ingress-bandwidth: fast}}
spec:
  containers: [{name: c, image: busybox}]
`), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Apply(context.Background(), pods, lifecycle.SourceAPI)
	if !errors.Is(err, lifecycle.ErrInvalid) || !strings.Contains(err.Error(), "metadata.annotations[kubernetes.io/ingress-bandwidth]") {
		t.Fatalf("got %v, want a refusal naming the annotation", err)
	}
}
