package kubeletproc

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/lab/crienv"
)

// Bounds of the privileged test.
const (
	// podWait bounds a static pod's way to Running and back to gone:
	// about a second each here, plus the 2 s grace of its sleep.
	podWait = 2 * time.Minute
	// testTimeout bounds the whole test.
	testTimeout = 6 * time.Minute
)

// testNamespace is the static pod's namespace, by which the test finds
// its containers in the runtime.
const testNamespace = "kubeletproc-test"

// kubeletBinary is the kubelet to test, or a skip: it fails instead
// when the binary was named (NODEGUARD_KUBELET_BIN) and
// NODEGUARD_REQUIRE_PRIVILEGED=1, since then it was meant to run.
func kubeletBinary(t *testing.T) string {
	t.Helper()
	bin, err := FindBinary()
	if err == nil {
		return bin
	}
	if os.Getenv(cgtest.EnvRequirePrivileged) == "1" && os.Getenv(EnvBinary) != "" {
		t.Fatalf("%v", err)
	}
	t.Skipf("%v", err)
	return ""
}

// staticPod is the test's manifest: busybox sleeping, with a memory limit
// (a Burstable pod) and a short grace, since sleep ignores SIGTERM.
func staticPod(image string) string {
	return `apiVersion: v1
kind: Pod
metadata:
  name: sleeper
  namespace: ` + testNamespace + `
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: sleep
    image: ` + image + `
    imagePullPolicy: Never
    command: ["sleep", "3600"]
    resources:
      limits:
        memory: 64Mi
`
}

// hostState is what the kubelet would change on the host if its mount
// namespace did not hide it.
func hostState(t *testing.T) map[string]string {
	t.Helper()
	st := map[string]string{}
	for _, s := range kernelDefaults {
		b, err := os.ReadFile("/proc/sys/" + s.path)
		if err != nil {
			t.Fatal(err)
		}
		st[s.path] = strings.TrimSpace(string(b))
	}
	for _, p := range []string{"/var/log/containers", "/var/log/pods", hostVarLib, hostContainerdDir + "/containerd.sock"} {
		_, err := os.Stat(p)
		st[p] = strconv.FormatBool(err == nil)
	}
	return st
}

func TestTheRealKubeletRunsAStaticPodBeneathItsCgroupRootAndLeavesNothing(t *testing.T) {
	cgtest.RequirePrivileged(t)
	bin := kubeletBinary(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	env := crienv.New(t)
	layout, err := cgroups.Discover()
	if err != nil {
		t.Fatal(err)
	}
	before := hostState(t)

	root, err := NewCgroupRoot(env)
	if err != nil {
		t.Fatal(err)
	}
	rootDirs, err := root.Dirs()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := root.Remove(); err != nil {
			t.Errorf("remove the cgroup root: %v", err)
		}
		for _, d := range rootDirs {
			if exists(d) {
				t.Errorf("cgroup root %s is still there", d)
			}
		}
	})
	// Not t.TempDir: the kubelet's sockets beneath its root directory
	// must stay within the 108 bytes of a unix socket path.
	dir, err := os.MkdirTemp("", "kubeletproc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	manifests := filepath.Join(dir, "manifests")
	if err := os.Mkdir(manifests, 0o755); err != nil {
		t.Fatal(err)
	}

	t0 := time.Now()
	k, err := Start(ctx, Options{Bin: bin, Dir: dir, RuntimeEndpoint: env.Endpoint(), StaticPodDir: manifests, CgroupRoot: root.Path(), MaxPods: 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubelet healthy %.2f s after Start (pid %d, port %d, node %s)", time.Since(t0).Seconds(), k.PID(), k.Port(), k.NodeName())
	closed := false
	t.Cleanup(func() {
		if !closed {
			if err := k.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		}
	})
	pid := k.PID()
	if comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); err != nil || strings.TrimSpace(string(comm)) != "kubelet" {
		t.Errorf("pid %d is %q (%v), want the kubelet itself", pid, comm, err)
	}

	t1 := time.Now()
	manifest := filepath.Join(manifests, "sleeper.yaml")
	if err := os.WriteFile(manifest, []byte(staticPod(env.BusyboxImage())), 0o644); err != nil {
		t.Fatal(err)
	}
	rt := env.RuntimeClient()
	var ctr *runtimeapi.Container
	waitFor(t, ctx, "the static pod's container to run", k, func() (bool, error) {
		cs, err := running(ctx, rt)
		if len(cs) > 0 {
			ctr = cs[0]
		}
		return len(cs) > 0, err
	})
	t.Logf("static pod Running %.2f s after its manifest was written", time.Since(t1).Seconds())

	t.Run("the container's cgroup is beneath the root in every hierarchy", func(t *testing.T) {
		st, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctr.GetId(), Verbose: true})
		if err != nil {
			t.Fatal(err)
		}
		var info struct {
			Pid int `json:"pid"`
		}
		if err := json.Unmarshal([]byte(st.GetInfo()["info"]), &info); err != nil || info.Pid <= 0 {
			t.Fatalf("no container pid in the verbose status (%v)", err)
		}
		for i := range layout.Hierarchies {
			h := &layout.Hierarchies[i]
			cg, err := cgroups.ProcessCgroup(info.Pid, h)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(cg, root.Path()+"/kubepods/") {
				t.Errorf("hierarchy %d %v: the container is in %s, want beneath %s/kubepods", h.ID, h.Controllers, cg, root.Path())
			}
		}
	})
	t.Run("the server answers anonymous requests on the loopback", func(t *testing.T) {
		body, err := k.Get(ctx, "/pods")
		if err != nil {
			t.Fatal(err)
		}
		if want := `"name":"sleeper-` + k.NodeName() + `"`; !strings.Contains(string(body), want) {
			t.Errorf("/pods lacks %s: %.300s", want, body)
		}
		if _, err := k.Get(ctx, "/metrics/probes"); err != nil {
			t.Error(err)
		}
	})

	t2 := time.Now()
	if err := os.Remove(manifest); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the static pod's container to stop", k, func() (bool, error) {
		cs, err := running(ctx, rt)
		return len(cs) == 0, err
	})
	t.Logf("static pod's container gone %.2f s after its manifest was removed", time.Since(t2).Seconds())

	closed = true
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	t.Run("nothing of the kubelet is left", func(t *testing.T) {
		if exists("/proc/" + strconv.Itoa(pid)) {
			t.Errorf("pid %d is still there", pid)
		}
		for _, d := range rootDirs {
			entries, err := os.ReadDir(d)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if e.IsDir() {
					t.Errorf("cgroup %s is left in %s", e.Name(), d)
				}
			}
		}
		sbs, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(sbs.GetItems()); n != 0 {
			t.Errorf("%d pod sandboxes left on the runtime", n)
		}
		for _, name := range []string{configName, wrapperName, rootName, pkiName, podLogsName, varLibName, sysctlName} {
			if exists(filepath.Join(dir, name)) {
				t.Errorf("%s is left in %s", name, dir)
			}
		}
		if !exists(k.LogPath()) {
			t.Errorf("the log %s is gone, want it kept", k.LogPath())
		}
	})
	t.Run("the host saw none of it", func(t *testing.T) {
		after := hostState(t)
		for key, v := range before {
			if after[key] != v {
				t.Errorf("%s: %s before, %s after", key, v, after[key])
			}
		}
	})
	t.Logf("kubelet log %s, warnings and errors:\n%s", k.LogPath(), logProblems(t, k.LogPath()))
}

// running lists the test pod's running containers.
func running(ctx context.Context, rt runtimeapi.RuntimeServiceClient) ([]*runtimeapi.Container, error) {
	resp, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{"io.kubernetes.pod.namespace": testNamespace},
	}})
	return resp.GetContainers(), err
}

// waitFor polls cond until it holds, at most podWait; it fails t with the
// kubelet's log when it does not.
func waitFor(t *testing.T, ctx context.Context, what string, k *Kubelet, cond func() (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, podWait)
	defer cancel()
	var last error
	for {
		ok, err := cond()
		if ok && err == nil {
			return
		}
		last = err
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (last error: %v); kubelet log:\n%s", what, ctx.Err(), last, k.LogTail())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// logProblems are the kubelet's warning and error lines (klog's W and E),
// each once, for the test's output.
func logProblems(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	seen := map[string]bool{}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if len(l) < 30 || (l[0] != 'W' && l[0] != 'E') {
			continue
		}
		// Drop klog's header (level, date, time, pid, file:line]) to
		// count repeats once.
		msg := l
		if i := strings.Index(l, "] "); i > 0 {
			msg = l[i+2:]
		}
		if len(msg) > 200 {
			msg = msg[:200]
		}
		key := string(l[0]) + " " + msg
		if !seen[key] {
			seen[key] = true
			out = append(out, key)
		}
	}
	if len(out) == 0 {
		return "(none)"
	}
	return strings.Join(out, "\n")
}

// TestAKubeletThatExitsEarlySaysWhyAndSawItsMounts runs a shell script in
// the kubelet's place: it prints what the kubelet would find in its mount
// namespace, then exits before healthz ever answers. It needs no kubelet
// binary and no containerd (a unix socket stands in for the runtime).
func TestAKubeletThatExitsEarlySaysWhyAndSawItsMounts(t *testing.T) {
	cgtest.RequirePrivileged(t)
	layout, err := cgroups.Discover()
	if err != nil {
		t.Fatal(err)
	}
	before := hostState(t)
	root, err := makeCgroupRoot(layout, "kubeletproc-test-"+strconv.Itoa(os.Getpid())+"/"+rootSuffix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := root.Remove(); err != nil {
			t.Errorf("remove the cgroup root: %v", err)
		}
	})
	dir, err := os.MkdirTemp("", "kubeletproc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "runtime.sock")
	// A socket nobody serves: Close's removal of pods is refused at once.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	bin := filepath.Join(dir, "kubelet")
	script := `#!/bin/sh
echo "args: $*"
echo "overcommit_memory=$(cat /proc/sys/vm/overcommit_memory) panic=$(cat /proc/sys/kernel/panic) panic_on_oops=$(cat /proc/sys/kernel/panic_on_oops)"
test -S /run/containerd/containerd.sock && echo "runtime socket: yes"
mountpoint -q /var/log && echo "/var/log: a mount of its own"
touch /var/lib/kubelet/probe && echo "/var/lib/kubelet: writable"
echo "no runtime here" >&2
exit 3
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	manifests := filepath.Join(dir, "manifests")
	if err := os.Mkdir(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = Start(t.Context(), Options{Bin: bin, Dir: dir, RuntimeEndpoint: "unix://" + sock, StaticPodDir: manifests, CgroupRoot: root.Path(), NodeName: "fake"})
	if err == nil {
		t.Fatal("Start succeeded with a kubelet that exits")
	}
	t.Logf("Start: %v", err)
	for _, want := range []string{
		"exited before it was healthy", "no runtime here",
		"--config=" + filepath.Join(dir, configName), "--hostname-override=fake",
		"overcommit_memory=1 panic=10 panic_on_oops=1",
		"runtime socket: yes", "/var/log: a mount of its own", "/var/lib/kubelet: writable",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Start's error lacks %q:\n%v", want, err)
		}
	}
	t.Run("the failed start removed what it made", func(t *testing.T) {
		for _, name := range []string{configName, wrapperName, rootName, pkiName, podLogsName, varLibName, sysctlName} {
			if exists(filepath.Join(dir, name)) {
				t.Errorf("%s is left in %s", name, dir)
			}
		}
		after := hostState(t)
		for key, v := range before {
			if after[key] != v {
				t.Errorf("%s: %s before, %s after", key, v, after[key])
			}
		}
	})
}
