package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/lab/crienv"
	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/cri"

	"github.com/nodeguard/nodeguard/internal/syncbuf"
)

// agent is one `nodeguard run` child against a private containerd, for
// the fault tests: restartable, killable, its log kept.
type agent struct {
	t      *testing.T
	bin    string
	env    *crienv.Env
	dir    string
	root   string // cgroup root
	sock   string
	config string
	cmd    *exec.Cmd
	log    *syncbuf.Buffer
	client *api.Client
}

func newAgent(t *testing.T, env *crienv.Env, stateDir string) *agent {
	t.Helper()
	dir := t.TempDir()
	if stateDir == "" {
		stateDir = filepath.Join(dir, "state")
	}
	a := &agent{t: t, bin: buildBinary(t), env: env, dir: stateDir, root: env.CgroupParent() + "/ng",
		sock: filepath.Join(dir, "api.sock"), config: envConfig(t, env, dir)}
	a.client = api.NewClient(a.sock)
	t.Cleanup(func() {
		// Pods outlive the agent (as they must across its restarts): the
		// test removes them through it, so that their mounts go too.
		if a.cmd != nil {
			a.removeAll()
		}
		a.client.Close()
		a.stop()
		if t.Failed() && a.log != nil {
			t.Logf("agent log (last run):\n%s", a.log.String())
		}
	})
	return a
}

func (a *agent) start() {
	a.t.Helper()
	if err := a.launch(30 * time.Second); err != nil {
		a.t.Fatal(err)
	}
}

// launch starts the agent and waits until it serves its API, at most
// within: an agent that exits first or does not answer in time is an
// error that carries its log.
func (a *agent) launch(within time.Duration) error {
	a.log = &syncbuf.Buffer{}
	a.cmd = exec.Command(a.bin, "run", "--config", a.config, "--runtime-endpoint", a.env.Endpoint(), "--cgroup-root", a.root,
		"--root-dir", a.dir, "--api-socket", a.sock, "--metrics-addr", "", "--log-level", "warn")
	a.cmd.Stdout, a.cmd.Stderr = a.log, a.log
	if err := a.cmd.Start(); err != nil {
		a.cmd = nil
		return fmt.Errorf("start the agent: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		if _, err := a.client.List(ctx); err == nil {
			return nil
		}
		if exited(a.cmd.Process.Pid) {
			return fmt.Errorf("the agent exited before serving its API; log:\n%s", a.log.String())
		}
		if ctx.Err() != nil {
			return fmt.Errorf("API never came up within %v; log:\n%s", within, a.log.String())
		}
		time.Sleep(30 * time.Millisecond)
	}
}

// exited reports whether our child pid has exited (a zombie not yet
// reaped), without reaping it: kill and stop still Wait for it.
func exited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command's closing parenthesis.
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}

// removeAll deletes every pod and waits, bounded, until none is left.
func (a *agent) removeAll() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	list, err := a.client.List(ctx)
	if err != nil {
		return
	}
	for _, p := range list.Items {
		_ = a.client.Delete(ctx, p.Namespace, p.Name)
	}
	for ctx.Err() == nil {
		if l, err := a.client.List(ctx); err == nil && len(l.Items) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// appendConfig adds YAML to the agent's configuration file.
func (a *agent) appendConfig(yaml string) {
	b, err := os.ReadFile(a.config)
	if err != nil {
		a.t.Fatal(err)
	}
	if err := os.WriteFile(a.config, append(b, yaml...), 0o600); err != nil {
		a.t.Fatal(err)
	}
}

// kill SIGKILLs the agent (our child, by its pid) and reaps it.
func (a *agent) kill() {
	if a.cmd == nil {
		return
	}
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	_ = a.cmd.Wait()
	a.cmd = nil
}

func (a *agent) stop() {
	if a.cmd == nil {
		return
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = a.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = a.cmd.Process.Kill()
		<-done
	}
	a.cmd = nil
}

func faultPod(name, image string) []byte {
	return []byte(fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  terminationGracePeriodSeconds: 0
  volumes:
  - {name: scratch, emptyDir: {}}
  - {name: fast, emptyDir: {medium: Memory, sizeLimit: 4Mi}}
  containers:
  - name: c
    image: %s
    command: [sh, -c, "echo up > /scratch/up; exec sleep 3600"]
    volumeMounts: [{name: scratch, mountPath: /scratch}, {name: fast, mountPath: /fast}]
`, name, image))
}

// waitRunning waits until exactly the named pods exist and run.
func (a *agent) waitRunning(ctx context.Context, names map[string]bool, within time.Duration) {
	a.t.Helper()
	deadline := time.Now().Add(within)
	for {
		list, err := a.client.List(ctx)
		if err == nil {
			running := 0
			for _, p := range list.Items {
				if names[p.Name] && p.Status.Phase == corev1.PodRunning {
					running++
				}
			}
			if running == len(names) && len(list.Items) == len(names) {
				return
			}
			if time.Now().After(deadline) {
				for _, p := range list.Items {
					a.t.Logf("%s: %s %s %s", p.Name, p.Status.Phase, p.Status.Reason, p.Status.Message)
				}
				a.t.Fatalf("%d of %d pods running (%d listed)", running, len(names), len(list.Items))
			}
		} else if time.Now().After(deadline) {
			a.t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// leftovers lists what removed pods can leak on the node: sandboxes and
// containers in the runtime, pod cgroups, mounts and pod directories under
// the state dir, netns files, IP leases and veths.
func (a *agent) leftovers(ctx context.Context, rt *cri.Client) []string {
	a.t.Helper()
	var left []string
	if sbs, err := rt.ListAllPodSandboxes(ctx); err == nil {
		for _, sb := range sbs {
			left = append(left, "sandbox "+sb.Id[:12])
		}
	}
	if ctrs, err := rt.ListContainers(ctx, "", nil); err == nil {
		for _, c := range ctrs {
			left = append(left, "container "+c.Id[:12])
		}
	}
	layout, err := cgroups.Discover()
	if err != nil {
		a.t.Fatal(err)
	}
	dirs, _ := layout.Resolve(a.root)
	for _, d := range dirs {
		_ = filepath.WalkDir(d.Path, func(p string, de os.DirEntry, err error) error {
			if err == nil && de.IsDir() && strings.HasPrefix(de.Name(), "pod") {
				left = append(left, "pod cgroup "+p)
			}
			return nil
		})
	}
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if fs := strings.Fields(sc.Text()); len(fs) > 4 && strings.HasPrefix(fs[4], a.dir+"/") {
				left = append(left, "mount "+fs[4])
			}
		}
		f.Close()
	}
	if ents, err := os.ReadDir(filepath.Join(a.dir, "pods")); err == nil {
		for _, e := range ents {
			left = append(left, "pod dir "+e.Name())
		}
	}
	if ents, err := os.ReadDir(a.env.NetNSDir()); err == nil {
		for _, e := range ents {
			left = append(left, "netns "+e.Name())
		}
	}
	nc := a.env.NetworkConfig()
	if ents, err := os.ReadDir(filepath.Join(nc.IPAMDir, nc.Name)); err == nil {
		for _, e := range ents {
			if n := e.Name(); n != "lock" && !strings.HasPrefix(n, "last_reserved_ip") {
				left = append(left, "ip lease "+n)
			}
		}
	}
	if out, err := exec.Command("nsenter", "--net="+a.env.NetNS(), "ip", "-o", "link", "show", "master", nc.Bridge).Output(); err == nil {
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if l != "" {
				left = append(left, "veth "+l)
			}
		}
	}
	return left
}

// TestFaultSIGKILLDuringChurnLeavesNothing kills `nodeguard run` at random
// points, 20 times, while it starts and removes pods with volumes and
// networks; each restart must adopt every pod (no duplicate sandbox) and,
// once every pod is deleted, nothing may be left on the node.
func TestFaultSIGKILLDuringChurnLeavesNothing(t *testing.T) {
	env := crienv.New(t)
	a := newAgent(t, env, "")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	rng := rand.New(rand.NewPCG(20261129, 8))
	const trials = 20
	desired := map[string]bool{}
	next := 0
	a.start()
	var adopt []time.Duration
	for trial := 0; trial < trials; trial++ {
		for i := 0; i < 2; i++ {
			name := fmt.Sprintf("f-%02d", next)
			next++
			if _, err := a.client.Apply(ctx, faultPod(name, env.BusyboxImage()), "fault"); err != nil {
				t.Fatal(err)
			}
			desired[name] = true
		}
		if trial%3 == 2 { // churn: one older pod goes
			for name := range desired {
				if err := a.client.Delete(ctx, "default", name); err != nil {
					t.Fatal(err)
				}
				delete(desired, name)
				break
			}
		}
		time.Sleep(time.Duration(rng.IntN(900)) * time.Millisecond)
		a.kill()
		start := time.Now()
		a.start()
		a.waitRunning(ctx, desired, 90*time.Second)
		adopt = append(adopt, time.Since(start))
	}
	rt, err := cri.Dial(ctx, env.Endpoint(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	// One sandbox per pod. A SIGKILL during RunPodSandbox leaves the
	// runtime finishing the killed call's sandbox while the restarted
	// agent makes its own; the agent removes the older one at the pod's
	// next sync. So the count must come down to one per pod, within a
	// bound, and stay there.
	var sbs []*runtimeapi.PodSandbox
	converge := time.Now()
	for deadline := converge.Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		sbs, err = rt.ListPodSandbox(ctx, nil)
		if err == nil && len(sbs) == len(desired) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%d sandboxes for %d pods 30 s after the last of %d SIGKILLs (%v)", len(sbs), len(desired), trials, err)
			break
		}
	}
	if d := time.Since(converge); d > 300*time.Millisecond {
		t.Logf("a duplicate sandbox from a killed RunPodSandbox was removed %v after all pods ran", d.Round(time.Millisecond))
	}
	time.Sleep(2 * time.Second)
	if sbs, err = rt.ListPodSandbox(ctx, nil); err != nil || len(sbs) != len(desired) {
		t.Errorf("%d sandboxes for %d pods 2 s later (%v)", len(sbs), len(desired), err)
	}
	for name := range desired {
		if err := a.client.Delete(ctx, "default", name); err != nil {
			t.Fatal(err)
		}
	}
	var left []string
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		left = a.leftovers(ctx, rt)
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("left after deleting every pod: %v", left)
	}
	var max, sum time.Duration
	for _, d := range adopt {
		sum += d
		max = maxDur(max, d)
	}
	t.Logf("%d SIGKILLs at random points, %d pods applied, %d deleted during churn; restart to all pods running: mean %v, max %v; %d things left after deleting every pod",
		trials, next, next-len(desired), (sum / time.Duration(len(adopt))).Round(time.Millisecond), max.Round(time.Millisecond), len(left))
}

func maxDur(a, b time.Duration) time.Duration {
	if a > b {
		return a
	}
	return b
}

// TestFaultContainerdRestartUnderNodeguard kills containerd (SIGKILL, as a
// crash) under a running agent and restarts it: the agent reconnects, the
// pods keep running (same containers), none is duplicated, and a pod
// applied while the runtime was down runs once it is back.
func TestFaultContainerdRestartUnderNodeguard(t *testing.T) {
	env := crienv.New(t)
	a := newAgent(t, env, "")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	a.start()
	desired := map[string]bool{}
	for i := 0; i < 4; i++ {
		name := fmt.Sprintf("r-%d", i)
		if _, err := a.client.Apply(ctx, faultPod(name, env.BusyboxImage()), "fault"); err != nil {
			t.Fatal(err)
		}
		desired[name] = true
	}
	a.waitRunning(ctx, desired, 60*time.Second)
	before := containerIDs(ctx, t, a)
	if err := env.KillContainerd(); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	if _, err := a.client.Apply(ctx, faultPod("while-down", env.BusyboxImage()), "fault"); err != nil {
		t.Fatalf("apply while the runtime is down: %v", err)
	}
	desired["while-down"] = true
	time.Sleep(3 * time.Second)
	if err := env.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	a.waitRunning(ctx, desired, 90*time.Second)
	recovered := time.Since(down)
	after := containerIDs(ctx, t, a)
	for name, id := range before {
		if after[name] != id {
			t.Errorf("pod %s: container %s replaced by %s across the runtime restart", name, id, after[name])
		}
	}
	rt, err := cri.Dial(ctx, env.Endpoint(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if sbs, err := rt.ListPodSandbox(ctx, nil); err != nil || len(sbs) != len(desired) {
		t.Errorf("%d sandboxes for %d pods (%v)", len(sbs), len(desired), err)
	}
	t.Logf("containerd down 3 s: %d pods kept their containers, the pod applied meanwhile ran, all running %v after the kill",
		len(before), recovered.Round(time.Millisecond))
}

func containerIDs(ctx context.Context, t *testing.T, a *agent) map[string]string {
	t.Helper()
	list, err := a.client.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range list.Items {
		if len(p.Status.ContainerStatuses) > 0 {
			out[p.Name] = p.Status.ContainerStatuses[0].ContainerID
		}
	}
	return out
}

// TestFaultFullStateDisk puts the state directory on a 16 MiB tmpfs and
// fills it: a new API pod cannot be persisted and is refused with an error
// saying so, running pods are untouched, and once space is back the same
// apply works.
func TestFaultFullStateDisk(t *testing.T) {
	env := crienv.New(t)
	state := filepath.Join(t.TempDir(), "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", state, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=16m,mode=0700"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(state, unix.MNT_DETACH) })
	a := newAgent(t, env, state)
	// Only a memory threshold: filling nodefs would otherwise (rightly)
	// raise DiskPressure, evict by disk use and refuse pods for the
	// 5-minute transition period; this test is about persisting state.
	a.appendConfig("eviction:\n  evictionHard: {memory.available: 100Mi}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a.start()
	if _, err := a.client.Apply(ctx, faultPod("before", env.BusyboxImage()), "fault"); err != nil {
		t.Fatal(err)
	}
	a.waitRunning(ctx, map[string]bool{"before": true}, 60*time.Second)
	before := containerIDs(ctx, t, a)
	fill := filepath.Join(state, "fill")
	f, err := os.Create(fill)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			break // ENOSPC
		}
	}
	f.Close()
	_, err = a.client.Apply(ctx, faultPod("after", env.BusyboxImage()), "fault")
	if err == nil || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("apply on a full state disk: %v, want an error saying the disk is full", err)
	}
	t.Logf("refused on a full disk: %v", err)
	time.Sleep(2 * time.Second)
	if got := containerIDs(ctx, t, a); got["before"] != before["before"] {
		t.Errorf("the running pod was disturbed: %v -> %v", before, got)
	}
	if _, err := a.client.Get(ctx, "default", "after"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("the refused pod is desired anyway (%v)", err)
	}
	os.Remove(fill)
	if _, err := a.client.Apply(ctx, faultPod("after", env.BusyboxImage()), "fault"); err != nil {
		t.Fatalf("apply once space is back: %v", err)
	}
	a.waitRunning(ctx, map[string]bool{"before": true, "after": true}, 60*time.Second)
}

// TestFaultPodCgroupRemovedUnderneath kills a running pod's processes and
// removes its cgroups behind the agent's back, as an operator's mistake
// would: the agent notices the dead sandbox and makes the pod again.
func TestFaultPodCgroupRemovedUnderneath(t *testing.T) {
	env := crienv.New(t)
	a := newAgent(t, env, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a.start()
	if _, err := a.client.Apply(ctx, faultPod("victim", env.BusyboxImage()), "fault"); err != nil {
		t.Fatal(err)
	}
	a.waitRunning(ctx, map[string]bool{"victim": true}, 60*time.Second)
	before := containerIDs(ctx, t, a)["victim"]
	layout, err := cgroups.Discover()
	if err != nil {
		t.Fatal(err)
	}
	dirs, err := layout.Resolve(a.root)
	if err != nil {
		t.Fatal(err)
	}
	removed := 0
	for _, d := range dirs {
		var pods []string
		_ = filepath.WalkDir(d.Path, func(p string, de os.DirEntry, err error) error {
			if err == nil && de.IsDir() && strings.HasPrefix(de.Name(), "pod") {
				pods = append(pods, p)
			}
			return nil
		})
		for _, p := range pods {
			removed += killAndRemove(t, p)
		}
	}
	if removed == 0 {
		t.Fatal("found no pod cgroup to remove")
	}
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		p, err := a.client.Get(ctx, "default", "victim")
		if err == nil && p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1 &&
			p.Status.ContainerStatuses[0].ContainerID != before && p.Status.ContainerStatuses[0].State.Running != nil {
			t.Logf("pod made again after its cgroups were removed: %s -> %s", before[:24], p.Status.ContainerStatuses[0].ContainerID[:24])
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pod was not made again: %+v (%v)", p.Status, err)
		}
	}
	if a.cmd.ProcessState != nil {
		t.Fatal("the agent died")
	}
}

// killAndRemove SIGKILLs the processes of a cgroup subtree (the test's own
// pods) and removes its directories, deepest first, through the cgroups
// room (EmptyTree, RemoveTree); it returns how many directories went.
func killAndRemove(t *testing.T, dir string) int {
	var all []string
	_ = cgroups.Walk(dir, func(p string) error {
		all = append(all, p)
		return nil
	})
	if err := cgroups.EmptyTree(dir, time.Now().Add(time.Second)); err != nil {
		t.Logf("kill the processes of %s: %v", dir, err)
	}
	if err := cgroups.RemoveTree(dir, time.Now().Add(time.Second)); err != nil {
		t.Logf("remove %s: %v", dir, err)
	}
	removed := 0
	for _, p := range all {
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			removed++
		}
	}
	return removed
}

// TestFaultAPIFlood floods the API socket: 64 clients, 3000 requests
// (lists, malformed applies, unknown routes). Work stays bounded (excess
// requests get 503, never a queue), the agent's RSS does not grow by more
// than 32 MiB, and it still answers afterwards.
func TestFaultAPIFlood(t *testing.T) {
	env := crienv.New(t)
	a := newAgent(t, env, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a.start()
	rssBefore := rss(t, a.cmd.Process.Pid)
	var mu sync.Mutex
	codes := map[string]int{}
	var wg sync.WaitGroup
	for c := 0; c < 64; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := api.NewClient(a.sock)
			defer cl.Close()
			for i := 0; i < 3000/64; i++ {
				var err error
				switch i % 3 {
				case 0:
					_, err = cl.List(ctx)
				case 1:
					_, err = cl.Apply(ctx, []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: ''}\n"), "flood")
				default:
					_, err = cl.Get(ctx, "default", "nope")
				}
				kind := "ok"
				switch {
				case errors.Is(err, api.ErrBusy):
					kind = "busy (503)"
				case errors.Is(err, api.ErrInvalid):
					kind = "invalid (422)"
				case errors.Is(err, api.ErrNotFound):
					kind = "not found (404)"
				case err != nil:
					kind = "other: " + err.Error()
				}
				mu.Lock()
				codes[kind]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	rssAfter := rss(t, a.cmd.Process.Pid)
	t.Logf("flood: %v; agent RSS %d MiB -> %d MiB", codes, rssBefore>>20, rssAfter>>20)
	for k := range codes {
		if strings.HasPrefix(k, "other") {
			t.Errorf("unexpected answers: %s x%d", k, codes[k])
		}
	}
	if rssAfter > rssBefore+32<<20 {
		t.Errorf("RSS grew by %d MiB under the flood", (rssAfter-rssBefore)>>20)
	}
	if _, err := a.client.List(ctx); err != nil {
		t.Fatalf("the agent no longer answers: %v", err)
	}
}

func rss(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}
