package agent

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/internal/syncbuf"
	"github.com/nodeguard/nodeguard/lab/crienv"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/lifecycle/podspec"
	"github.com/nodeguard/nodeguard/qos"
)

// kubeletPods runs pods in env's containerd as the kubelet runs them: its
// labels (not nodeguard's mark), the pod cgroups beneath kubepods as its
// cgroupfs driver names them. It returns each pod's sandbox and first
// container; the sandboxes are removed at cleanup.
func kubeletPods(t *testing.T, ctx context.Context, env *crienv.Env, c *cri.Client, manifests string, before func()) (sandbox, container map[string]string) {
	t.Helper()
	pods, err := podspec.Parse(strings.NewReader(strings.ReplaceAll(manifests, "BUSYBOX", env.BusyboxImage())), "kubelet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sandbox, container = map[string]string{}, map[string]string{}
	cfgs := map[string]*runtimeapi.PodSandboxConfig{}
	for _, pod := range pods {
		parent, err := kubepods.PodParent(kubepods.Cgroupfs, env.CgroupParent(), qos.Class(pod), pod.UID)
		if err != nil {
			t.Fatal(err)
		}
		logDir := filepath.Join(env.PodsDir(), string(pod.UID))
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			t.Fatal(err)
		}
		cfg := cri.SandboxConfig(pod, cri.SandboxOptions{CgroupParent: parent, LogDir: logDir})
		delete(cfg.Labels, cri.ManagedLabel)
		id, err := c.RunPodSandbox(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		sandbox[pod.Name], cfgs[pod.Name] = id, cfg
		t.Cleanup(func() {
			cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = c.StopPodSandbox(cctx, id)
			if err := c.RemovePodSandbox(cctx, id); err != nil {
				t.Errorf("remove sandbox %s: %v", id, err)
			}
		})
	}
	if before != nil {
		before()
	}
	for _, pod := range pods {
		cc, err := cri.ContainerConfig(pod, &pod.Spec.Containers[0], cri.ContainerOptions{Image: env.BusyboxImage()})
		if err != nil {
			t.Fatal(err)
		}
		delete(cc.Labels, cri.ManagedLabel)
		id, err := c.CreateContainer(ctx, sandbox[pod.Name], cc, cfgs[pod.Name])
		if err != nil {
			t.Fatal(err)
		}
		if err := c.StartContainer(ctx, id); err != nil {
			t.Fatal(err)
		}
		container[pod.Name] = id
	}
	return sandbox, container
}

// nodeguard guard, the binary, beside a runtime whose pods a kubelet made
// (a private containerd, kubepods beneath it with a memory limit as the
// kubelet's node allocatable, no API server): a hog that grows without
// bound is found, its crossing of allocatableMemory.available seen by
// the same sensing and tripwire as nodeguard run's, and its pod cgroup
// killed before the kernel's OOM killer fires, the other pod untouched.
// The real kubelet beside it is the node lane's check.
func TestGuardDaemonKillsTheKubeletsHogBeforeTheKernel(t *testing.T) {
	env := crienv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := cri.Dial(ctx, env.Endpoint(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	layout, err := cgroups.Discover()
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubepods.Name(kubepods.Cgroupfs, env.CgroupParent())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.RemoveCgroup(kube); err != nil {
			t.Errorf("remove %s: %v", kube, err)
		}
	})
	bin := buildBinary(t)
	const limit = 512 << 20
	kubeDir, err := layout.Memory.Resolve(kube)
	if err != nil {
		t.Fatal(err)
	}
	limitFile, eventsFile := "memory.limit_in_bytes", "memory.oom_control"
	if layout.Memory.V2() {
		limitFile, eventsFile = "memory.max", "memory.events"
	}
	logb := &syncbuf.Buffer{}
	_, ctrs := kubeletPods(t, ctx, env, c, `
apiVersion: v1
kind: Pod
metadata: {name: hog, namespace: shop}
spec:
  containers:
  - {name: main, image: BUSYBOX, command: [sh, -c, "sleep 2; exec tail /dev/zero"], resources: {requests: {memory: 16Mi}}}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop}
spec:
  containers:
  - {name: main, image: BUSYBOX, command: [sleep, "3600"]}
`, func() {
		// The kubelet's node allocatable on kubepods, before any
		// container runs; then the guard, running before the hog grows.
		if err := os.WriteFile(filepath.Join(kubeDir.Path, limitFile), []byte(strconv.Itoa(limit)), 0); err != nil {
			t.Fatal(err)
		}
		startGuard(t, bin, env, logb)
	})
	start := time.Now()
	var hog *runtimeapi.ContainerStatus
	for time.Since(start) < 90*time.Second {
		if hog, err = c.ContainerStatus(ctx, ctrs["hog"]); err == nil && hog.GetState() == runtimeapi.ContainerState_CONTAINER_EXITED {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if hog.GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Fatalf("the hog still runs 90 s on (state %s)", hog.GetState())
	}
	web, err := c.ContainerStatus(ctx, ctrs["web"])
	if err != nil || web.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("web: %v, %v; want it running", web.GetState(), err)
	}
	// v2's memory.events counts the kills beneath kubepods too; v1
	// counts each in the killed task's own cgroup: every one is read.
	kills := 0
	err = filepath.WalkDir(kubeDir.Path, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() || (layout.Memory.V2() && p != kubeDir.Path) {
			return err
		}
		if b, err := os.ReadFile(filepath.Join(p, eventsFile)); err == nil {
			kills += oomKills(string(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if kills != 0 {
		t.Errorf("the kernel OOM-killed %d times in kubepods (%s): the guard was late", kills, eventsFile)
	}
	log := logb.String()
	var decision string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "evict pod") && strings.Contains(l, "victim=shop/hog") {
			decision = l
		}
	}
	if decision == "" || !strings.Contains(log, "guard: pod cgroup killed") {
		t.Fatalf("no decision on shop/hog or no kill in the guard's log (the hog: exit code %d, reason %s)", hog.GetExitCode(), hog.GetReason())
	}
	t.Logf("the hog exited %v after the guard started (exit code %d, reason %s); the decision: %s", time.Since(start).Round(time.Millisecond),
		hog.GetExitCode(), hog.GetReason(), decision)
}

// startGuard starts nodeguard guard beside env's runtime, its pods beneath
// env's cgroup parent, and waits until it runs; it is interrupted at
// cleanup, and must stop within 30 s.
func startGuard(t *testing.T, bin string, env *crienv.Env, logb *syncbuf.Buffer) {
	t.Helper()
	dir := t.TempDir()
	config := filepath.Join(dir, "guard.yaml")
	if err := os.WriteFile(config, []byte("eviction:\n  evictionHard: {memory.available: 200Mi}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "guard", "--config", config, "--runtime-endpoint", env.Endpoint(), "--cgroup-driver", "cgroupfs",
		"--cgroup-root", env.CgroupParent(), "--root-dir", filepath.Join(dir, "root"), "--metrics-addr", freePort(t))
	cmd.Stdout, cmd.Stderr = logb, logb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("nodeguard guard: %v", err)
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Error("nodeguard guard did not stop within 30 s of SIGINT")
		}
		if t.Failed() {
			t.Logf("guard's log:\n%s", logb.String())
		}
	})
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(logb.String(), "nodeguard guard running"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("nodeguard guard not running after 60 s; its log:\n%s", logb.String())
		}
	}
}

// oomKills reads the oom_kill count of a memory.events or
// memory.oom_control file.
func oomKills(s string) int {
	for _, l := range strings.Split(s, "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "oom_kill" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}
