package cri

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/lab/crienv"
	"github.com/nodeguard/nodeguard/lifecycle/logs"
	"github.com/nodeguard/nodeguard/lifecycle/podspec"
	"github.com/nodeguard/nodeguard/qos"
)

// Bounds of the privileged tests. Each says why it has its value.
const (
	// podTimeout bounds everything one test does through CRI: a sandbox
	// takes 115-200 ms here, a container 80-140 ms, a stop 2 s at most.
	podTimeout = 2 * time.Minute
	// waitTimeout bounds a wait for a container to reach a state or for
	// its log to fill: each takes well under a second here (a memcg OOM
	// ~50 ms after the first allocation).
	waitTimeout = 20 * time.Second
	// nodeMemory is the memory capacity given to the oom_score_adj
	// formula: the development machines have 24 GiB.
	nodeMemory = 24 << 30
)

// podYAML is the test pod: main sleeps after writing to both streams, fail
// exits 3, hog fills a 16Mi memory limit (busybox tail buffers /dev/zero,
// which has no newline, without end). hog waits 200 ms first: containerd
// 1.6's shim registers its v1 OOM eventfd (memory.oom_control) only after
// the task started, and a hog that reached its limit 1 ms after start was
// reported as Error, not OOMKilled (seen once on a freshly booted machine).
const podYAML = `
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: cri-test
  labels: {app: web}
  annotations: {note: hello}
spec:
  restartPolicy: Never
  dnsPolicy: Default
  dnsConfig:
    searches: [pods.test]
    options: [{name: edns0}]
  hostname: front
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: %[1]s
    command: [sh, -c]
    args: ["echo hello $(POD_NAME); echo oops >&2; exec sleep 3600"]
    env:
    - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
    - {name: POD_NAMESPACE, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
    - {name: POD_UID, valueFrom: {fieldRef: {fieldPath: metadata.uid}}}
    - {name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
    - {name: APP, valueFrom: {fieldRef: {fieldPath: "metadata.labels['app']"}}}
    - {name: NOTE, valueFrom: {fieldRef: {fieldPath: "metadata.annotations['note']"}}}
    - {name: POD_IPS, valueFrom: {fieldRef: {fieldPath: status.podIPs}}}
    - {name: GREETING, value: "hi from $(POD_NAME)"}
    resources:
      limits: {cpu: 500m, memory: 128Mi}
    securityContext:
      allowPrivilegeEscalation: false
      capabilities: {drop: [ALL], add: [CAP_NET_BIND_SERVICE]}
  - name: fail
    image: %[1]s
    command: [sh, -c, "echo bye; exit 3"]
  - name: hog
    image: %[1]s
    command: [sh, -c, "sleep 0.2; exec tail /dev/zero"]
    resources:
      limits: {memory: 16Mi}
`

// runningPod is a pod run through the conversions.
type runningPod struct {
	pod        *corev1.Pod
	sandboxID  string
	sandboxCfg *runtimeapi.PodSandboxConfig
	podParent  string // relative to this process's cgroups
	ip         string
	containers map[string]string // name -> id
}

func TestRealRuntime(t *testing.T) {
	e := crienv.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), podTimeout)
	defer cancel()

	c, err := Dial(ctx, e.Endpoint(), 10*time.Second)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()
	info := c.Runtime()
	t.Logf("runtime %+v", info)
	if info.Name != "containerd" || info.APIVersion != "v1" || info.Version == "" {
		t.Errorf("handshake = %+v, want containerd serving v1", info)
	}

	t.Run("a bare socket path works as an endpoint", func(t *testing.T) {
		c2, err := Dial(ctx, e.Socket(), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c2.Close()
	})
	t.Run("a missing socket next to the real one is an EndpointError", func(t *testing.T) {
		_, err := Dial(ctx, "unix://"+e.Socket()+".missing", 10*time.Second)
		var ee *EndpointError
		if !errors.As(err, &ee) || !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("an unknown container is ErrNotFound", func(t *testing.T) {
		_, err := c.ContainerStatus(ctx, strings.Repeat("0", 64))
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("DeleteTask of a container without a task is nothing to do", func(t *testing.T) {
		if err := c.DeleteTask(ctx, "0123456789abcdef"); err != nil {
			t.Errorf("DeleteTask: %v, want nil", err)
		}
	})
	t.Run("a missing image is ErrImageNotPresent and nothing is pulled", func(t *testing.T) {
		_, err := c.EnsureImage(ctx, "registry.local/nodeguard/absent:1", corev1.PullIfNotPresent, nil)
		if !errors.Is(err, ErrImageNotPresent) || !strings.Contains(err.Error(), "registry.local/nodeguard/absent:1") {
			t.Errorf("err = %v", err)
		}
	})

	p := runPod(ctx, t, e, c)

	t.Run("the sandbox is ready with an address of the env's subnet", func(t *testing.T) {
		st, err := c.PodSandboxStatus(ctx, p.sandboxID)
		if err != nil {
			t.Fatal(err)
		}
		ip, err := netip.ParseAddr(st.IP)
		if !st.Ready || err != nil || !netip.MustParsePrefix(crienv.DefaultSubnet).Contains(ip) || !slices.Equal(st.IPs, []string{st.IP}) {
			t.Errorf("status: ready %v ip %q ips %v", st.Ready, st.IP, st.IPs)
		}
	})
	t.Run("the sandbox carries the labels and is listed as nodeguard's", func(t *testing.T) {
		list, err := c.ListPodSandbox(ctx, map[string]string{PodUIDLabel: string(p.pod.UID)})
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || list[0].GetId() != p.sandboxID {
			t.Fatalf("listed %v, want only %s", list, p.sandboxID)
		}
		l := list[0].GetLabels()
		if l[ManagedLabel] != "true" || l[PodNameLabel] != "web" || l[PodNamespaceLabel] != "cri-test" || l["app"] != "web" {
			t.Errorf("labels = %v", l)
		}
		ctrs, err := c.ListContainers(ctx, p.sandboxID, nil)
		if err != nil || len(ctrs) != 3 {
			t.Errorf("containers %v (%v), want 3", ctrs, err)
		}
		// The relist's reading of the runtime's answer is the whole one's.
		relisted, err := c.Relist(ctx)
		if err != nil {
			t.Fatal(err)
		}
		byID := map[string]RelistedContainer{}
		for _, r := range relisted {
			byID[r.ID] = r
		}
		for _, ctr := range ctrs {
			want := RelistedContainer{ID: ctr.Id, SandboxID: ctr.PodSandboxId, PodUID: ctr.Labels[PodUIDLabel], State: ctr.State}
			got := byID[ctr.Id]
			if got.State != want.State && got.State == runtimeapi.ContainerState_CONTAINER_EXITED {
				// Listed before the relist: a container (the one that
				// fails) may have exited in between.
				want.State = got.State
			}
			if got != want || want.PodUID != string(p.pod.UID) {
				t.Errorf("relisted %+v, want %+v (pod UID %s)", got, want, p.pod.UID)
			}
		}
		sandboxes, err := c.RelistSandboxes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var found bool
		for _, sb := range sandboxes {
			if sb.ID == p.sandboxID {
				found = true
				want := RelistedSandbox{ID: list[0].Id, PodUID: string(p.pod.UID), State: list[0].State}
				if sb != want || want.State != runtimeapi.PodSandboxState_SANDBOX_READY {
					t.Errorf("relisted sandbox %+v, want %+v (ready)", sb, want)
				}
			}
		}
		if !found {
			t.Errorf("relisted sandboxes %+v, want %s among them", sandboxes, p.sandboxID)
		}
	})
	t.Run("the pause process runs under seccomp RuntimeDefault", func(t *testing.T) {
		resp, err := e.RuntimeClient().PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: p.sandboxID, Verbose: true})
		if err != nil {
			t.Fatal(err)
		}
		var info struct {
			Pid int `json:"pid"`
		}
		if err := json.Unmarshal([]byte(resp.GetInfo()["info"]), &info); err != nil || info.Pid <= 0 {
			t.Fatalf("no pause pid (%v)", err)
		}
		if got := procStatusField(t, info.Pid, "Seccomp"); got != "2" {
			t.Errorf("pause Seccomp = %q, want 2 (filter)", got)
		}
	})

	main := p.containers["main"]
	exec := func(t *testing.T, cmd ...string) string {
		t.Helper()
		res, err := c.ExecSync(ctx, main, cmd, 10*time.Second)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec %q: %v, exit %d, stderr %q", cmd, err, res.ExitCode, res.Stderr)
		}
		return string(res.Stdout)
	}
	t.Run("env has the pod's fields and expanded values", func(t *testing.T) {
		env := strings.Split(exec(t, "env"), "\n")
		for _, want := range []string{"POD_NAME=web", "POD_NAMESPACE=cri-test", "POD_UID=" + string(p.pod.UID), "POD_IP=" + p.ip, "GREETING=hi from web",
			"APP=web", "NOTE=hello", "POD_IPS=" + p.ip} {
			if !slices.Contains(env, want) {
				t.Errorf("env lacks %q: %q", want, env)
			}
		}
	})
	t.Run("the hostname and resolv.conf are the pod's", func(t *testing.T) {
		if got := exec(t, "hostname"); got != "front\n" {
			t.Errorf("hostname = %q", got)
		}
		want := "search example.test pods.test\nnameserver 192.0.2.53\noptions ndots:2 edns0\n"
		if got := exec(t, "cat", "/etc/resolv.conf"); got != want {
			t.Errorf("resolv.conf = %q, want %q", got, want)
		}
	})
	t.Run("capabilities CAP_-prefixed in the pod are granted and no_new_privs is set", func(t *testing.T) {
		status := exec(t, "cat", "/proc/1/status")
		if got := field(status, "CapEff"); got != "0000000000000400" {
			t.Errorf("CapEff = %q, want only CAP_NET_BIND_SERVICE (0x400)", got)
		}
		if got := field(status, "NoNewPrivs"); got != "1" {
			t.Errorf("NoNewPrivs = %q", got)
		}
	})
	t.Run("oom_score_adj is the QoS policy's", func(t *testing.T) {
		want, err := qos.OOMScoreAdj(p.pod, &p.pod.Spec.Containers[0], nodeMemory)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(exec(t, "cat", "/proc/1/oom_score_adj")); got != strconv.Itoa(want) {
			t.Errorf("oom_score_adj = %s, want %d", got, want)
		}
	})
	t.Run("the cgroup limits are the converted resources", func(t *testing.T) {
		dirs, err := e.CgroupDirs(p.podParent + "/" + main)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{
			"memory.limit_in_bytes": "134217728",
			"cpu.shares":            "512",
			"cpu.cfs_quota_us":      "50000",
			"cpu.cfs_period_us":     "100000",
		}
		for name, v := range want {
			found := false
			for _, d := range dirs {
				b, err := os.ReadFile(filepath.Join(d, name))
				if err != nil {
					continue
				}
				found = true
				if got := strings.TrimSpace(string(b)); got != v {
					t.Errorf("%s/%s = %s, want %s", d, name, got, v)
				}
			}
			if !found {
				t.Errorf("no %s in %v", name, dirs)
			}
		}
	})
	t.Run("ExecSync returns both streams and the exit code", func(t *testing.T) {
		res, err := c.ExecSync(ctx, main, []string{"sh", "-c", "echo out; echo err >&2; exit 7"}, 10*time.Second)
		if err != nil || res.ExitCode != 7 || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" {
			t.Errorf("exec: %v, exit %d, stdout %q, stderr %q", err, res.ExitCode, res.Stdout, res.Stderr)
		}
	})
	t.Run("the log holds each stream", func(t *testing.T) {
		path := filepath.Join(p.sandboxCfg.LogDirectory, ContainerLogPath("main", 0))
		waitLog(ctx, t, path, logs.Options{Tail: -1, Stream: logs.StreamStdout}, "hello web\n")
		waitLog(ctx, t, path, logs.Options{Tail: -1, Stream: logs.StreamStderr}, "oops\n")
		// The runtime copies the two streams concurrently, so their order
		// in the file is not the order of the writes.
		var all strings.Builder
		if err := logs.Read(ctx, path, logs.Options{Tail: -1}, &all); err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitAfter(all.String(), "\n")
		if len(lines) != 3 || lines[2] != "" {
			t.Fatalf("both streams: %q, want two lines", all.String())
		}
		waitLog(ctx, t, path, logs.Options{Tail: 1}, lines[1])
	})
	t.Run("a container that exits 3 is Exited with code 3", func(t *testing.T) {
		s := waitExited(ctx, t, c, p.containers["fail"])
		// FinishedAt may precede StartedAt by a millisecond: see State.
		if s.ExitCode != 3 || s.Reason != ReasonError || s.OOMKilled || s.FinishedAt.IsZero() || s.FinishedAt.Sub(s.StartedAt).Abs() > 5*time.Second {
			t.Errorf("state = %+v", s)
		}
		waitLog(ctx, t, filepath.Join(p.sandboxCfg.LogDirectory, ContainerLogPath("fail", 0)), logs.Options{Tail: -1}, "bye\n")
	})
	t.Run("a container over its 16Mi memory limit is OOMKilled with exit 137", func(t *testing.T) {
		s := waitExited(ctx, t, c, p.containers["hog"])
		if !s.OOMKilled || s.ExitCode != 137 || s.Reason != ReasonOOMKilled {
			t.Errorf("state = %+v", s)
		}
		t.Logf("hog ran %v before the OOM kill", s.FinishedAt.Sub(s.StartedAt).Round(time.Millisecond))
	})

	removePod(ctx, t, e, c, p)
}

// runPod parses podYAML, runs its sandbox and starts its containers through
// SandboxConfig and ContainerConfig, and logs the latencies.
func runPod(ctx context.Context, t *testing.T, e *crienv.Env, c *Client) *runningPod {
	t.Helper()
	pods, err := podspec.Parse(strings.NewReader(fmt.Sprintf(podYAML, e.BusyboxImage())), "cri-test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pod := pods[0]
	if _, errs := podspec.Validate(pod, podspec.Options{}); len(errs) > 0 {
		t.Fatalf("the test pod is invalid: %v", errs.ToAggregate())
	}
	class := qos.Class(pod)
	parent, err := kubepods.PodParent(kubepods.Cgroupfs, e.CgroupParent(), class, pod.UID)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.IsAbs(parent) {
		t.Fatalf("pod cgroup parent %q is absolute", parent)
	}
	logDir := filepath.Join(e.PodsDir(), pod.Namespace+"_"+pod.Name+"_"+string(pod.UID))
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := &runningPod{pod: pod, podParent: parent, containers: map[string]string{}}
	p.sandboxCfg = SandboxConfig(pod, SandboxOptions{
		CgroupParent: parent,
		LogDir:       logDir,
		DNS:          &runtimeapi.DNSConfig{Servers: []string{"192.0.2.53"}, Searches: []string{"example.test"}, Options: []string{"ndots:2"}},
	})
	t0 := time.Now()
	p.sandboxID, err = c.RunPodSandbox(ctx, p.sandboxCfg)
	if err != nil {
		t.Fatalf("%v\ncontainerd log:\n%s", err, tail(e.LogFile()))
	}
	t.Logf("latency: RunPodSandbox %v", time.Since(t0).Round(time.Millisecond))
	t.Cleanup(func() { bestEffortRemove(e, c, p) })

	st, err := c.PodSandboxStatus(ctx, p.sandboxID)
	if err != nil {
		t.Fatal(err)
	}
	p.ip = st.IP
	imageID, err := c.EnsureImage(ctx, e.BusyboxImage(), corev1.PullIfNotPresent, p.sandboxCfg)
	if err != nil || !strings.HasPrefix(imageID, "sha256:") {
		t.Fatalf("EnsureImage %s: %q, %v", e.BusyboxImage(), imageID, err)
	}
	for i := range pod.Spec.Containers {
		ctr := &pod.Spec.Containers[i]
		adj, err := qos.OOMScoreAdj(pod, ctr, nodeMemory)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := ContainerConfig(pod, ctr, ContainerOptions{
			Image: imageID, OOMScoreAdj: int64(adj), PodIP: p.ip, EnforceCPULimits: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		id, err := c.CreateContainer(ctx, p.sandboxID, cfg, p.sandboxCfg)
		if err != nil {
			t.Fatalf("%v\ncontainerd log:\n%s", err, tail(e.LogFile()))
		}
		p.containers[ctr.Name] = id
		if err := c.StartContainer(ctx, id); err != nil {
			t.Fatalf("%v\ncontainerd log:\n%s", err, tail(e.LogFile()))
		}
		t.Logf("latency: CreateContainer+StartContainer %s %v", ctr.Name, time.Since(t1).Round(time.Millisecond))
	}
	return p
}

// removePod stops and removes the pod through CRI, then removes the pod's
// cgroup and the QoS parents this test created, in every hierarchy.
func removePod(ctx context.Context, t *testing.T, e *crienv.Env, c *Client, p *runningPod) {
	t.Helper()
	t0 := time.Now()
	grace := time.Duration(*p.pod.Spec.TerminationGracePeriodSeconds) * time.Second
	if err := c.StopContainer(ctx, p.containers["main"], grace); err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	if err := c.StopPodSandbox(ctx, p.sandboxID); err != nil {
		t.Fatal(err)
	}
	if err := c.RemovePodSandbox(ctx, p.sandboxID); err != nil {
		t.Fatal(err)
	}
	t.Logf("latency: StopContainer(main, %v) %v, StopPodSandbox+RemovePodSandbox %v", grace,
		t1.Sub(t0).Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
	if s := ContainerState(mustStatusGone(ctx, t, c, p.containers["main"])); s.Phase != PhaseUnknown {
		t.Errorf("main after removal: %+v", s)
	}
	if list, err := c.ListPodSandbox(ctx, map[string]string{PodUIDLabel: string(p.pod.UID)}); err != nil || len(list) != 0 {
		t.Errorf("sandboxes after removal: %v (%v)", list, err)
	}

	// CRI removed the containers' cgroups; the pod's and the QoS parents
	// (kubepods/burstable) are this test's.
	kubeCg, err := kubepods.Name(kubepods.Cgroupfs, e.CgroupParent())
	if err != nil {
		t.Fatal(err)
	}
	podDirs, err := e.CgroupDirs(p.podParent)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range podDirs {
		ents, _ := os.ReadDir(d)
		for _, ent := range ents {
			if ent.IsDir() {
				t.Errorf("CRI left container cgroup %s/%s", d, ent.Name())
			}
		}
	}
	if err := e.RemoveCgroup(kubeCg); err != nil {
		t.Fatal(err)
	}
	dirs, err := e.CgroupDirs(kubeCg)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range append(dirs, podDirs...) {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("cgroup %s still exists (%v)", d, err)
		}
	}
}

// mustStatusGone returns nil after checking that the container is gone.
func mustStatusGone(ctx context.Context, t *testing.T, c *Client, id string) *runtimeapi.ContainerStatus {
	t.Helper()
	if _, err := c.ContainerStatus(ctx, id); !errors.Is(err, ErrNotFound) {
		t.Errorf("status of removed container %s: %v, want ErrNotFound", id, err)
	}
	return nil
}

// bestEffortRemove removes the sandbox if the test stopped before it did;
// crienv's Close removes whatever is left after that.
func bestEffortRemove(e *crienv.Env, c *Client, p *runningPod) {
	// t.Context() is already cancelled when cleanups run.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, id := range p.containers {
		c.StopContainer(ctx, id, 0)
	}
	c.StopPodSandbox(ctx, p.sandboxID)
	c.RemovePodSandbox(ctx, p.sandboxID)
	if k, err := kubepods.Name(kubepods.Cgroupfs, e.CgroupParent()); err == nil {
		e.RemoveCgroup(k)
	}
}

func waitExited(ctx context.Context, t *testing.T, c *Client, id string) State {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	for {
		st, err := c.ContainerStatus(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if s := ContainerState(st); s.Phase == PhaseExited {
			return s
		}
		select {
		case <-ctx.Done():
			t.Fatalf("container %s did not exit: %v", id, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func waitLog(ctx context.Context, t *testing.T, path string, opts logs.Options, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	var b strings.Builder
	for {
		b.Reset()
		err := logs.Read(ctx, path, opts, &b)
		if err == nil && b.String() == want {
			return
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("log %s with %+v = %q, want %q", path, opts, b.String(), want)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func procStatusField(t *testing.T, pid int, name string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	return field(string(b), name)
}

// field returns the value of "Name:\tvalue" in a /proc status text.
func field(status, name string) string {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// tail returns the last lines of a log file for an error message.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-15):], "\n")
}

// TestLatencies runs a few one-container pods in a row through the Client
// and logs the median of each step.
func TestLatencies(t *testing.T) {
	const pods = 5
	e := crienv.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), podTimeout)
	defer cancel()
	c, err := Dial(ctx, e.Endpoint(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	kubeCg, err := kubepods.Name(kubepods.Cgroupfs, e.CgroupParent())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := e.RemoveCgroup(kubeCg); err != nil {
			t.Error(err)
		}
	}()
	var run, start, stop []time.Duration
	for i := range pods {
		pods, err := podspec.Parse(strings.NewReader(fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: lat-%d, namespace: cri-test}
spec:
  containers:
  - {name: main, image: %s, command: [sleep, "3600"]}
`, i, e.BusyboxImage())), "latency.yaml")
		if err != nil {
			t.Fatal(err)
		}
		pod := pods[0]
		parent, err := kubepods.PodParent(kubepods.Cgroupfs, e.CgroupParent(), qos.Class(pod), pod.UID)
		if err != nil {
			t.Fatal(err)
		}
		logDir := filepath.Join(e.PodsDir(), string(pod.UID))
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			t.Fatal(err)
		}
		scfg := SandboxConfig(pod, SandboxOptions{CgroupParent: parent, LogDir: logDir})
		t0 := time.Now()
		sid, err := c.RunPodSandbox(ctx, scfg)
		if err != nil {
			t.Fatal(err)
		}
		run = append(run, time.Since(t0))
		st, err := c.PodSandboxStatus(ctx, sid)
		if err != nil {
			t.Fatal(err)
		}
		ccfg, err := ContainerConfig(pod, &pod.Spec.Containers[0], ContainerOptions{PodIP: st.IP, OOMScoreAdj: 1000, EnforceCPULimits: true})
		if err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		cid, err := c.CreateContainer(ctx, sid, ccfg, scfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.StartContainer(ctx, cid); err != nil {
			t.Fatal(err)
		}
		start = append(start, time.Since(t1))
		t2 := time.Now()
		if err := c.StopContainer(ctx, cid, 0); err != nil {
			t.Fatal(err)
		}
		if err := c.StopPodSandbox(ctx, sid); err != nil {
			t.Fatal(err)
		}
		if err := c.RemovePodSandbox(ctx, sid); err != nil {
			t.Fatal(err)
		}
		stop = append(stop, time.Since(t2))
		if err := e.RemoveCgroup(parent); err != nil {
			t.Fatal(err)
		}
	}
	median := func(d []time.Duration) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[len(s)/2].Round(time.Millisecond)
	}
	t.Logf("latency over %d pods, median: RunPodSandbox %v, CreateContainer+StartContainer %v, StopContainer(0)+StopPodSandbox+RemovePodSandbox %v",
		pods, median(run), median(start), median(stop))
}
