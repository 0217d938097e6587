package guard

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/evictionapi"
	"github.com/nodeguard/nodeguard/oomadj"
)

// holdEnv makes the test binary a process that holds that many MiB of
// touched memory until killed (a pod's process in these tests).
const holdEnv = "NODEGUARD_GUARD_TEST_HOLD_MIB"

func TestMain(m *testing.M) {
	if v := os.Getenv(holdEnv); v != "" {
		mib, err := strconv.Atoi(v)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		b := make([]byte, mib<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		fmt.Println("ready")
		time.Sleep(2 * time.Minute) // bounded: the test kills it long before
		b[0]++
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// podRig is kubepods beneath the test's cgroup with pods of the kubelet's
// in it, each with a real process, listed as the kubelet's sandboxes.
type podRig struct {
	t      *testing.T
	root   *cgtest.Sandbox
	kube   *cgtest.Sandbox
	list   *sandboxList
	finder *Finder
	qos    map[corev1.PodQOSClass]*cgtest.Sandbox
}

func newPodRig(t *testing.T) *podRig {
	cgtest.RequirePrivileged(t)
	root := cgtest.New(t)
	r := &podRig{t: t, root: root, kube: root.Child(t, "kubepods"), list: &sandboxList{}, qos: map[corev1.PodQOSClass]*cgtest.Sandbox{}}
	r.finder = &Finder{Runtime: r.list, Layout: root.Layout(), Driver: kubepods.Cgroupfs, Root: root.Rel()}
	return r
}

// pod makes a pod cgroup of class beneath kubepods (or, outside, directly
// beneath the test's cgroup), lists its sandbox, and starts a process in
// it holding mib MiB; it returns the pod cgroup and the process.
func (r *podRig) pod(uid, name string, class corev1.PodQOSClass, mib int, outside bool) (*cgtest.Sandbox, *exec.Cmd) {
	t := r.t
	t.Helper()
	parent := r.kube
	switch {
	case outside:
		parent = r.root
	case class != corev1.PodQOSGuaranteed:
		if r.qos[class] == nil {
			r.qos[class] = r.kube.Child(t, strings.ToLower(string(class)))
		}
		parent = r.qos[class]
	}
	cg := parent.Child(t, "pod"+uid)
	r.list.sbs = append(r.list.sbs, kubeletSandbox("sb-"+name, uid, "default", name, 1, runtimeapi.PodSandboxState_SANDBOX_READY, nil))
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holdEnv+"="+strconv.Itoa(mib))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cg.Start(t, cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("the pod's process: %q, %v", line, err)
	}
	return cg, cmd
}

func memoryCurrent(t *testing.T, cg *cgtest.Sandbox) int64 {
	t.Helper()
	file := "memory.usage_in_bytes"
	if cg.Layout().Memory.V2() {
		file = "memory.current"
	}
	b, err := os.ReadFile(filepath.Join(cg.MemoryDir(), file))
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func processExists(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// A zombie (killed, not reaped yet) is not alive.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && !strings.HasPrefix(s[i+1:], " Z")
}

func newActor(t *testing.T, cfg Config) *Actor {
	t.Helper()
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	return a
}

func decision(uid, name string, hard bool) evictionapi.Decision {
	return evictionapi.Decision{Hard: hard, GracePeriod: 30 * time.Second, Message: "The node was low on resource: memory.",
		Victim: evictionapi.Pod{UID: types.UID(uid), Namespace: "default", Name: name}}
}

const (
	uidHog   = "6a000000-0000-4000-8000-000000000001"
	uidOther = "6a000000-0000-4000-8000-000000000002"
	uidOut   = "6a000000-0000-4000-8000-000000000003"
	uidGuar  = "6a000000-0000-4000-8000-000000000004"
)

// A hard eviction kills the victim's pod cgroup, releasing its memory at
// once, whether there is no API server at all or one that cannot be
// reached (the API call waits in the background); other pods and
// processes outside kubepods are untouched, and a sandbox whose cgroup is
// not beneath kubepods is not the guard's to act on.
func TestHardEvictionReleasesTheVictimsMemoryWithoutTheAPIServer(t *testing.T) {
	for _, api := range []string{"none", "unreachable"} {
		t.Run("API server "+api, func(t *testing.T) {
			r := newPodRig(t)
			hogCg, hog := r.pod(uidHog, "hog", corev1.PodQOSBurstable, 64, false)
			_, other := r.pod(uidOther, "other", corev1.PodQOSBestEffort, 1, false)
			_, out := r.pod(uidOut, "outside", corev1.PodQOSBestEffort, 1, true)
			cfg := Config{Finder: r.finder, NodeName: "node", RetryInitial: 50 * time.Millisecond}
			if api == "unreachable" {
				cfg.Client = unreachableClient(t)
			}
			a := newActor(t, cfg)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- a.Run(ctx) }()
			t.Cleanup(func() {
				cancel()
				<-done
			})
			if got := podNames(a.Pods(false)); got != "hog,other" {
				t.Fatalf("pods %q, want hog,other (outside kubepods: not the guard's)", got)
			}
			before := memoryCurrent(t, hogCg)
			start := time.Now()
			if err := a.Evict(ctx, decision(uidHog, "hog", true)); err != nil {
				t.Fatalf("hard eviction: %v", err)
			}
			returned := time.Since(start)
			hog.Wait()
			var released time.Duration
			for time.Since(start) < 10*time.Second {
				if memoryCurrent(t, hogCg) < before/4 {
					released = time.Since(start)
					break
				}
				time.Sleep(time.Millisecond)
			}
			if released == 0 {
				t.Fatalf("the hog's cgroup still holds %d bytes (of %d) 10 s after the kill", memoryCurrent(t, hogCg), before)
			}
			t.Logf("hard eviction with API server %s: Evict returned after %v, %d MiB released after %v", api, returned, before>>20, released)
			if !processExists(other.Process.Pid) || !processExists(out.Process.Pid) {
				t.Error("a process of another pod or outside kubepods was killed")
			}
			if got := podNames(a.Pods(false)); got != "other" {
				t.Errorf("pods after the eviction %q, want other alone", got)
			}
			c := a.Counts()
			if c.Killed != 1 {
				t.Errorf("killed %d, want 1", c.Killed)
			}
			if api == "unreachable" {
				// The API call fails and is retried, in the background.
				deadline := time.Now().Add(10 * time.Second)
				for a.Counts().APIErrors < 2 && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond)
				}
				if c := a.Counts(); c.APIErrors < 2 || c.Pending != 1 || c.Deletes != 0 {
					t.Errorf("counts %+v, want the API call failed and retried (api errors >= 2), still pending", c)
				}
			} else if c.Pending != 0 {
				t.Errorf("counts %+v: nothing to remove through an API server there is none of", c)
			}
			// The kubelet makes the pod a new sandbox: listed again, to
			// be killed again if it grows again.
			r.list.update(func(sbs []*runtimeapi.PodSandbox) []*runtimeapi.PodSandbox {
				// A new sandbox, not a change under a running actor's reads.
				sb := proto.Clone(sbs[0]).(*runtimeapi.PodSandbox)
				sb.Id = "sb-hog-2"
				sbs[0] = sb
				return sbs
			})
			if err := a.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if got := podNames(a.Pods(false)); got != "hog,other" {
				t.Errorf("pods after the hog's new sandbox %q, want hog,other", got)
			}
			// Outside kubepods: no pod of the guard's, nothing killed.
			err := a.Evict(ctx, decision(uidOut, "outside", true))
			if !errors.Is(err, ErrNotFound) || !processExists(out.Process.Pid) {
				t.Errorf("evict a sandbox outside kubepods: %v (process alive %v), want ErrNotFound and nothing killed", err, processExists(out.Process.Pid))
			}
		})
	}
}

// A soft eviction only ever asks the Eviction API: without an API server
// it is refused (evictionapi.ErrEvictionRefused: the manager asks again at its
// next tick, not at once), and nothing is killed.
func TestSoftEvictionWithoutTheAPIServerKillsNothing(t *testing.T) {
	r := newPodRig(t)
	_, p := r.pod(uidHog, "web", corev1.PodQOSBurstable, 1, false)
	a := newActor(t, Config{Finder: r.finder})
	err := a.Evict(context.Background(), decision(uidHog, "web", false))
	if !errors.Is(err, ErrNoAPIServer) || !errors.Is(err, evictionapi.ErrEvictionRefused) {
		t.Errorf("soft eviction without an API server: %v, want ErrNoAPIServer (an evictionapi.ErrEvictionRefused)", err)
	}
	if !processExists(p.Process.Pid) {
		t.Error("the pod's process was killed")
	}
	if got := podNames(a.Pods(false)); got != "web" {
		t.Errorf("pods %q, want web still listed", got)
	}
}

// Without an API server, a pod's figures come from the node: the QoS
// class from its cgroup's place, a Guaranteed pod's memory request from
// its cgroup's limit, a static pod critical; its task count is read.
func TestFiguresFromTheNodeAlone(t *testing.T) {
	r := newPodRig(t)
	g, _ := r.pod(uidGuar, "db", corev1.PodQOSGuaranteed, 1, false)
	if err := g.SetMemoryLimit(256 << 20); err != nil {
		t.Fatal(err)
	}
	r.pod(uidOther, "batch", corev1.PodQOSBestEffort, 1, false)
	r.list.sbs[1].Annotations = map[string]string{ConfigSourceAnnotation: "file"}
	a := newActor(t, Config{Finder: r.finder, Exempt: []string{"default/db"}})
	refs := a.Pods(false)
	if len(refs) != 2 {
		t.Fatalf("pods %+v, want 2", refs)
	}
	batch, db := refs[0], refs[1]
	if db.QOS != corev1.PodQOSGuaranteed || db.MemoryRequest != 256<<20 || !db.Exempt || db.Critical || db.PIDs < 1 || db.PIDsUnknown {
		t.Errorf("db: %+v, want Guaranteed, its 256 MiB limit as its request, exempt, its tasks counted", db.Pod)
	}
	if batch.QOS != corev1.PodQOSBestEffort || batch.MemoryRequest != 0 || !batch.Critical || !batch.Static || batch.Priority != 0 {
		t.Errorf("batch: %+v, want BestEffort, no request, static and so critical", batch.Pod)
	}
	if calm := a.Pods(true); !calm[0].PIDsUnknown {
		t.Errorf("a calm listing read the task count: %+v", calm[0].Pod)
	}
	id, err := g.MemoryID()
	if err != nil {
		t.Fatal(err)
	}
	if db.CgroupID != id {
		t.Errorf("db's cgroup id %d, want %d", db.CgroupID, id)
	}
}

// The next victim's raise writes every process of the pod, and restore
// gives each back the kubelet's value it had.
func TestOOMScoreAdjRaiseAndRestore(t *testing.T) {
	r := newPodRig(t)
	_, p := r.pod(uidHog, "web", corev1.PodQOSBurstable, 1, false)
	if err := oomadj.Write(p.Process.Pid, 937); err != nil {
		t.Fatal(err)
	}
	a := newActor(t, Config{Finder: r.finder})
	if err := a.SetOOMScoreAdj(uidHog, 1000); err != nil {
		t.Fatal(err)
	}
	if v, _ := oomadj.Read(p.Process.Pid); v != 1000 {
		t.Errorf("raised to %d, want 1000", v)
	}
	if err := a.RestoreOOMScoreAdj(uidHog); err != nil {
		t.Fatal(err)
	}
	if v, _ := oomadj.Read(p.Process.Pid); v != 937 {
		t.Errorf("restored to %d, want the kubelet's 937", v)
	}
	if err := a.SetOOMScoreAdj(uidOut, 1000); !errors.Is(err, ErrNotFound) {
		t.Errorf("raise of an unknown pod: %v, want ErrNotFound", err)
	}
}

func podNames(refs []evictionapi.PodRef) string {
	var names []string
	for _, r := range refs {
		names = append(names, r.Name)
	}
	return strings.Join(names, ",")
}

// unreachableClient is a client of an API server on a loopback port that
// nothing listens on.
func unreachableClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "http://" + addr, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}
