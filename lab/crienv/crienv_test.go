package crienv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

// smokeTimeout bounds the CRI calls of the smoke test (each takes well under
// a second here; StopContainer waits its 2 s grace at most).
const smokeTimeout = 2 * time.Minute

// TestCRISmoke runs one pod through the whole CRI lifecycle in a real
// environment and checks that Close leaves nothing behind.
func TestCRISmoke(t *testing.T) {
	e := New(t)
	ctx, cancel := context.WithTimeout(t.Context(), smokeTimeout)
	defer cancel()
	rt := e.RuntimeClient()

	v, err := rt.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		t.Fatalf("Version: %v", err)
	}
	t.Logf("runtime %s %s, CRI %s", v.GetRuntimeName(), v.GetRuntimeVersion(), v.GetRuntimeApiVersion())

	uid := randHex(8)
	podParent := e.CgroupParent() + "/pod" + uid
	logDir := filepath.Join(e.PodsDir(), uid)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	sandboxCfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "smoke", Namespace: "crienv-test", Uid: uid, Attempt: 0},
		Hostname:     "smoke",
		LogDirectory: logDir,
		// Never used (nothing resolves names), but CRI needs one.
		DnsConfig: &runtimeapi.DNSConfig{Servers: []string{"127.0.0.1"}},
		Labels: map[string]string{
			"io.kubernetes.pod.name":      "smoke",
			"io.kubernetes.pod.namespace": "crienv-test",
			"io.kubernetes.pod.uid":       uid,
		},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			// RELATIVE: runc resolves it against its own cgroup, ours.
			CgroupParent:    podParent,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{}},
		},
	}
	t0 := time.Now()
	run, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandboxCfg})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v\ncontainerd log:\n%s", err, e.logTail())
	}
	runLatency := time.Since(t0)
	podID := run.GetPodSandboxId()

	ctrCfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "main"},
		Image:    &runtimeapi.ImageSpec{Image: e.BusyboxImage()},
		Command:  []string{"sh", "-c", "echo hello; sleep 3600"},
		LogPath:  "main/0.log",
		Labels: map[string]string{
			"io.kubernetes.container.name": "main",
			"io.kubernetes.pod.uid":        uid,
		},
		Linux: &runtimeapi.LinuxContainerConfig{},
	}
	t1 := time.Now()
	created, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: ctrCfg, SandboxConfig: sandboxCfg})
	if err != nil {
		t.Fatalf("CreateContainer: %v\ncontainerd log:\n%s", err, e.logTail())
	}
	ctrID := created.GetContainerId()
	if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctrID}); err != nil {
		t.Fatalf("StartContainer: %v\ncontainerd log:\n%s", err, e.logTail())
	}
	startLatency := time.Since(t1)
	t.Logf("RunPodSandbox %v, CreateContainer+StartContainer %v", runLatency.Round(time.Millisecond), startLatency.Round(time.Millisecond))

	t.Run("containerd runs in the env's network namespace", func(t *testing.T) {
		var st unix.Stat_t
		if err := unix.Stat(e.NetNS(), &st); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("net:[%d]", st.Ino)
		got, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", e.cmd.Process.Pid))
		if err != nil || got != want {
			t.Fatalf("containerd's netns is %q (%v), want %s", got, err, want)
		}
		if self, _ := os.Readlink("/proc/self/ns/net"); self == want {
			t.Fatalf("the env's netns is this process's own (%s)", self)
		}
	})

	t.Run("the container runs", func(t *testing.T) {
		st, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctrID, Verbose: true})
		if err != nil {
			t.Fatalf("ContainerStatus: %v", err)
		}
		if got := st.GetStatus().GetState(); got != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("container state %v, want RUNNING", got)
		}
		var info struct {
			Pid int `json:"pid"`
		}
		if err := json.Unmarshal([]byte(st.GetInfo()["info"]), &info); err != nil || info.Pid <= 0 {
			t.Fatalf("verbose ContainerStatus has no pid (%v): %.200s", err, st.GetInfo()["info"])
		}
		// The container's process is in the pod's cgroup beneath ours,
		// in every hierarchy.
		cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", info.Pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
			if !strings.Contains(line, "/"+podParent+"/"+ctrID) {
				t.Errorf("container pid %d cgroup line %q is not beneath %s", info.Pid, line, podParent)
			}
		}
	})

	t.Run("the log shows hello", func(t *testing.T) {
		logFile := filepath.Join(logDir, "main", "0.log")
		var data []byte
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			data, _ = os.ReadFile(logFile)
			if strings.Contains(string(data), " stdout F hello\n") {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("%s after 5 s: %q, want a CRI log line \"<time> stdout F hello\"", logFile, data)
	})

	t.Run("ExecSync echo hi returns hi", func(t *testing.T) {
		res, err := rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: ctrID, Cmd: []string{"echo", "hi"}, Timeout: 10})
		if err != nil {
			t.Fatalf("ExecSync: %v", err)
		}
		if res.GetExitCode() != 0 || string(res.GetStdout()) != "hi\n" {
			t.Fatalf("ExecSync: exit %d, stdout %q, stderr %q; want 0, \"hi\\n\"", res.GetExitCode(), res.GetStdout(), res.GetStderr())
		}
	})

	t.Run("the pod got an address of the env's subnet and reaches its gateway", func(t *testing.T) {
		st, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: podID})
		if err != nil {
			t.Fatalf("PodSandboxStatus: %v", err)
		}
		ip, err := netip.ParseAddr(st.GetStatus().GetNetwork().GetIp())
		subnet := netip.MustParsePrefix(DefaultSubnet)
		if err != nil || !subnet.Contains(ip) {
			t.Fatalf("pod IP %q (%v), want one in %s", st.GetStatus().GetNetwork().GetIp(), err, subnet)
		}
		t.Logf("pod IP %s", ip)
		// One packet, from the pod to the bridge: both inside the env's
		// own network namespace.
		gw := subnet.Addr().Next().String()
		res, err := rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: ctrID, Cmd: []string{"ping", "-c", "1", "-W", "2", gw}, Timeout: 10})
		if err != nil || res.GetExitCode() != 0 {
			t.Errorf("ping %s from the pod: %v, exit %d: %s%s", gw, err, res.GetExitCode(), res.GetStdout(), res.GetStderr())
		}
		// The bridge exists in the env's namespace only.
		if _, err := net.InterfaceByName(e.Bridge()); err == nil {
			t.Errorf("bridge %s exists in the host's network namespace", e.Bridge())
		}
	})

	t.Run("traces outside the env dir are where Close looks for them", func(t *testing.T) {
		// If these moved, Close's cleanup of them would check nothing.
		if _, err := os.Stat(shimSocket(e.Socket(), criNamespace, podID)); err != nil {
			t.Errorf("shim socket of sandbox %s: %v", podID, err)
		}
		m, _ := filepath.Glob(filepath.Join(cniResultsDir, e.NetworkName()+"-"+podID+"-*"))
		if len(m) == 0 {
			t.Errorf("no CNI result %s/%s-%s-*", cniResultsDir, e.NetworkName(), podID)
		}
	})

	t2 := time.Now()
	if _, err := rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: ctrID, Timeout: 2}); err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	stopLatency := time.Since(t2)
	t3 := time.Now()
	if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	t.Logf("StopContainer(2) %v, StopPodSandbox+RemovePodSandbox %v", stopLatency.Round(time.Millisecond), time.Since(t3).Round(time.Millisecond))

	// CRI removed the leaf cgroups; the pod's parent is ours to remove.
	parents, err := e.CgroupDirs(podParent)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range parents {
		if ents, err := os.ReadDir(d); err == nil {
			for _, ent := range ents {
				if ent.IsDir() {
					t.Errorf("CRI left cgroup %s/%s", d, ent.Name())
				}
			}
		}
	}
	if err := e.RemoveCgroup(podParent); err != nil {
		t.Fatal(err)
	}
	for _, d := range parents {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("pod parent cgroup %s still there (%v)", d, err)
		}
	}

	sock, netns, dir := e.Socket(), e.NetNS(), e.Dir()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	t.Run("Close leaves nothing behind", func(t *testing.T) {
		left, err := e.Leftovers()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range left {
			t.Errorf("left behind: %s", l)
		}
		procs, err := findProcs(dir, sock)
		if err != nil || len(procs) > 0 {
			t.Errorf("processes of the env: %v (%v)", procs, err)
		}
		if mps, err := selfMountsUnder(dir); err != nil || len(mps) > 0 {
			t.Errorf("mounts under %s: %v (%v)", dir, mps, err)
		}
		for _, p := range []string{netns, dir, shimSocket(sock, criNamespace, podID)} {
			if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s still exists (%v)", p, err)
			}
		}
		top, err := e.CgroupDirs(e.CgroupParent())
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range top {
			if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("cgroup %s still exists (%v)", d, err)
			}
		}
		if m, _ := filepath.Glob(filepath.Join(cniResultsDir, e.NetworkName()+"-*")); len(m) > 0 {
			t.Errorf("CNI results left: %v", m)
		}
	})
}

// runPod runs a busybox pod that sleeps, with a cgroup parent beneath
// e.CgroupParent(), and returns its sandbox and container ids.
func runPod(ctx context.Context, t *testing.T, e *Env, name string) (podID, ctrID string) {
	t.Helper()
	rt := e.RuntimeClient()
	uid := randHex(8)
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "crienv-test", Uid: uid},
		LogDirectory: filepath.Join(e.PodsDir(), uid),
		DnsConfig:    &runtimeapi.DNSConfig{Servers: []string{"127.0.0.1"}},
		Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: e.CgroupParent() + "/pod" + uid},
	}
	run, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v\ncontainerd log:\n%s", err, e.logTail())
	}
	c, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: run.GetPodSandboxId(),
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "main"},
			Image:    &runtimeapi.ImageSpec{Image: e.BusyboxImage()},
			Command:  []string{"sleep", "3600"},
			LogPath:  "main.log",
		},
		SandboxConfig: cfg,
	})
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.GetContainerId()}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	return run.GetPodSandboxId(), c.GetContainerId()
}

// assertNothingLeft fails t for everything of e that still exists.
func assertNothingLeft(t *testing.T, e *Env) {
	t.Helper()
	left, err := e.Leftovers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range left {
		t.Errorf("left behind: %s", l)
	}
}

func TestCloseRemovesRunningPods(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), smokeTimeout)
	defer cancel()
	tests := []struct {
		name string
		// before runs between starting the pods and Close.
		before func(t *testing.T, e *Env)
	}{
		{"with containerd running, through CRI", func(*testing.T, *Env) {}},
		{"after containerd was SIGKILLed, through runc and the shims' pids", func(t *testing.T, e *Env) {
			if err := e.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-e.exited:
			case <-time.After(5 * time.Second):
				t.Fatal("containerd still running 5 s after SIGKILL")
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := New(t)
			var ids []string
			for _, name := range []string{"a", "b"} {
				podID, ctrID := runPod(ctx, t, e, name)
				ids = append(ids, podID, ctrID)
			}
			tt.before(t, e)
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			assertNothingLeft(t, e)
			for _, id := range ids {
				if !e.ids[id] {
					t.Errorf("Close did not learn id %s, so it checked none of its traces", id)
				}
			}
		})
	}
}

func TestTwoEnvsRunSideBySide(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), smokeTimeout)
	defer cancel()
	a, b := New(t), New(t)
	if a.Bridge() == b.Bridge() || a.CgroupParent() == b.CgroupParent() || a.NetNS() == b.NetNS() {
		t.Fatalf("envs share a bridge, cgroup parent or netns: %s %s, %s %s", a.Bridge(), b.Bridge(), a.CgroupParent(), b.CgroupParent())
	}
	runPod(ctx, t, a, "a")
	runPod(ctx, t, b, "b")
	for _, e := range []*Env{a, b} {
		ps, err := e.RuntimeClient().ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		if err != nil || len(ps.GetItems()) != 1 {
			t.Fatalf("env %s lists %d sandboxes (%v), want its own one", e.Dir(), len(ps.GetItems()), err)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, a)
	// b is untouched by a's Close.
	if st, err := b.RuntimeClient().ListContainers(ctx, &runtimeapi.ListContainersRequest{}); err != nil || len(st.GetContainers()) != 1 ||
		st.GetContainers()[0].GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("after closing a, b's containers: %v (%v), want one running", st.GetContainers(), err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, b)
}

func TestSweepStaleRemovesTheEnvOfADeadOwner(t *testing.T) {
	cgtest.RequirePrivileged(t)
	ctx, cancel := context.WithTimeout(t.Context(), smokeTimeout)
	defer cancel()
	// Not t.TempDir(): containerd's socket path must stay under 104 bytes.
	base, err := os.MkdirTemp("", "ngsweep-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(base) })
	e, err := Start(ctx, Options{BaseDir: base})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("crienv: %v", err)
		}
	})
	runPod(ctx, t, e, "orphan")

	t.Run("an env whose owner lives is left alone", func(t *testing.T) {
		if err := SweepStale(ctx, base, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := e.RuntimeClient().Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
			t.Fatalf("containerd after SweepStale: %v", err)
		}
	})

	t.Run("an env whose owner died is removed", func(t *testing.T) {
		// What a killed test binary leaves: containerd gone (its death
		// signal), the shims and pods running, and a record naming a
		// process that no longer exists (here: ours, with another start
		// time).
		e.collectIDs()
		if err := e.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-e.exited
		rec := filepath.Join(e.Dir(), recordFile)
		b, err := os.ReadFile(rec)
		if err != nil {
			t.Fatal(err)
		}
		var r record
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		r.OwnerStart++
		b, _ = json.Marshal(r)
		if err := os.WriteFile(rec, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := SweepStale(ctx, base, nil); err != nil {
			t.Fatal(err)
		}
		assertNothingLeft(t, e)
	})
}

func TestRecordValid(t *testing.T) {
	const dir = "/tmp/nodeguard-crienv-1"
	good := record{
		Socket: dir + "/containerd.sock", NetNS: dir + "/netns", RuncRoot: dir + "/runc",
		Network: "nodeguard-crienv-ab", Bridge: "ngbrab", CgroupParent: "nodeguard-crienv-1-ab",
	}
	if !good.valid(dir) {
		t.Fatal("a record as Start writes it is invalid")
	}
	tests := []struct {
		name   string
		modify func(*record)
	}{
		{"a socket outside the dir", func(r *record) { r.Socket = "/run/containerd/containerd.sock" }},
		{"a runc root that climbs out", func(r *record) { r.RuncRoot = dir + "/../../run/runc" }},
		{"a netns that is the dir itself", func(r *record) { r.NetNS = dir }},
		{"a network name that globs every result", func(r *record) { r.Network = "nodeguard-crienv-*" }},
		{"a foreign network name", func(r *record) { r.Network = "cbr0" }},
		{"a cgroup parent that climbs", func(r *record) { r.CgroupParent = "nodeguard-crienv-../.." }},
		{"a foreign cgroup parent", func(r *record) { r.CgroupParent = "kubepods" }},
	}
	for _, tt := range tests {
		t.Run("it rejects "+tt.name, func(t *testing.T) {
			r := good
			tt.modify(&r)
			if r.valid(dir) {
				t.Fatalf("record %+v is valid", r)
			}
		})
	}
}

func TestStartRefusesASocketPathTooLongForContainerd(t *testing.T) {
	cgtest.RequirePrivileged(t)
	base := filepath.Join(t.TempDir(), strings.Repeat("x", 60))
	if err := os.Mkdir(base, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), startTimeout)
	defer cancel()
	e, err := Start(ctx, Options{BaseDir: base})
	if err == nil {
		e.Close()
		t.Fatal("Start succeeded with a socket path over 104 bytes")
	}
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Start: %v, want ErrInvalidConfig", err)
	}
	if m, _ := filepath.Glob(filepath.Join(base, "*")); len(m) > 0 {
		t.Fatalf("failed Start left %v", m)
	}
}
