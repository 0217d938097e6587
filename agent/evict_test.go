package agent

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/pressure/nodestats"

	"github.com/nodeguard/nodeguard/internal/syncbuf"
)

// freePort returns a loopback address nothing listens on.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

const evictPods = `
apiVersion: v1
kind: Pod
metadata: {name: steady}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: c, image: registry.local/nodeguard/busybox:1.35, command: [sleep, "3600"], resources: {requests: {memory: 32Mi}, limits: {memory: 64Mi}}}
---
apiVersion: v1
kind: Pod
metadata: {name: idle-besteffort}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: c, image: registry.local/nodeguard/busybox:1.35, command: [sleep, "3600"]}
---
apiVersion: v1
kind: Pod
metadata: {name: hog}
spec:
  terminationGracePeriodSeconds: 5
  restartPolicy: Never
  containers:
  - {name: c, image: registry.local/nodeguard/busybox:1.35, command: [sh, -c, "sleep 2; exec tail /dev/zero"]}
`

// TestRunEvictsAHogBeforeTheKernelOOMKiller runs the agent as it ships
// (the binary, a private containerd) with node allocatable cut to 512 MiB
// through systemReserved: a BestEffort pod growing as fast as `tail
// /dev/zero` can (hundreds of MiB/s) must be evicted when
// allocatableMemory.available drops below 100Mi, before the kernel OOM
// killer of the pods' cgroup fires at 512 MiB; the right pod goes, and the
// eviction shows in its status, the metrics, the API's events and the log.
func TestRunEvictsAHogBeforeTheKernelOOMKiller(t *testing.T) {
	cgtest.RequirePrivileged(t)
	mi, err := nodestats.ReadMeminfo(nodestats.MeminfoPath)
	if err != nil {
		t.Fatal(err)
	}
	reserved := int64(mi.MemTotal) - 512<<20
	if reserved <= 0 {
		t.Skip("the machine has less than 512 MiB")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	client, addr, logb := startPrivateAgent(t, ctx, fmt.Sprintf("systemReserved: {memory: %q}\neviction:\n  evictionHard: {memory.available: 100Mi}\n", fmt.Sprint(reserved)))
	if _, err := client.Apply(ctx, []byte(evictPods), "test"); err != nil {
		t.Fatal(err)
	}
	var hog *corev1.Pod
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		hog, err = client.Get(ctx, "default", "hog")
		if err == nil && hog.Status.Reason == "Evicted" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hog was never evicted: %+v", hog.Status)
		}
	}
	t.Logf("hog: %s: %s", hog.Status.Reason, hog.Status.Message)
	// Once its containers are stopped, the status says so: terminated,
	// not ready, still Failed/Evicted.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		p, err := client.Get(ctx, "default", "hog")
		if err == nil && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Terminated != nil {
			cs := p.Status.ContainerStatuses[0]
			if cs.Ready || p.Status.Phase != corev1.PodFailed || p.Status.Reason != "Evicted" {
				t.Errorf("stopped evicted hog: ready %v, phase %s, reason %s", cs.Ready, p.Status.Phase, p.Status.Reason)
			}
			for _, c := range p.Status.Conditions {
				if (c.Type == corev1.PodReady || c.Type == corev1.ContainersReady) && c.Status != corev1.ConditionFalse {
					t.Errorf("stopped evicted hog: %s %s", c.Type, c.Status)
				}
			}
			t.Logf("hog's container once stopped: exit %d, %s", cs.State.Terminated.ExitCode, cs.State.Terminated.Reason)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the evicted hog's container never showed stopped: %+v", p.Status.ContainerStatuses)
		}
	}
	if hog.Status.Phase != corev1.PodFailed || !strings.Contains(hog.Status.Message, "low on resource: memory") {
		t.Errorf("hog status %s %q, want Failed with the kubelet's message", hog.Status.Phase, hog.Status.Message)
	}
	for _, name := range []string{"steady", "idle-besteffort"} {
		p, err := client.Get(ctx, "default", name)
		if err != nil || p.Status.Phase != corev1.PodRunning {
			t.Errorf("collateral: %s is %v (%v)", name, p.Status.Phase, err)
		}
	}
	evs, err := client.Events(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var evicted, released, oomKills int
	for _, e := range evs {
		switch e.Kind {
		case "eviction":
			evicted++
			t.Logf("event: %s", e.Object)
		case "eviction_released":
			released++
		case "oom_kill":
			oomKills++
			t.Logf("kernel OOM kill: %s", e.Object)
		}
	}
	if evicted != 1 || oomKills != 0 {
		t.Errorf("events: %d evictions (want 1), %d kernel OOM kills (want 0)", evicted, oomKills)
	}
	body := scrape(t, addr)
	for _, want := range []string{
		`kubelet_evictions{eviction_signal="allocatableMemory.available"} 1`,
		`nodeguard_node_condition{condition="MemoryPressure"} 1`,
		`nodeguard_eviction_latency_seconds_count{stage="detect"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	line := ""
	for _, l := range strings.Split(logb.String(), "\n") {
		if strings.Contains(l, `msg="evict pod"`) {
			line = l
		}
	}
	if line == "" {
		t.Errorf("no eviction log line")
	} else if !strings.Contains(line, "snapshot_latency=") || !strings.Contains(line, "snapshot_read=") {
		t.Errorf("the eviction log line does not break the decide stage down: %s", line)
	}
	t.Logf("%s", line)
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "nodeguard_eviction_latency_seconds_sum") {
			t.Log(l)
		}
	}
	_ = released
}

// startPrivateAgent runs `nodeguard run --private-runtime` with the given
// configuration, metrics on a free loopback port, and waits for its API.
// At cleanup it deletes every pod through the agent (so that their
// volumes go too), interrupts it and waits, bounded; on failure the
// agent's log is printed.
func startPrivateAgent(t *testing.T, ctx context.Context, config string) (*api.Client, string, *syncbuf.Buffer) {
	t.Helper()
	bin := buildBinary(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	// The private containerd has only locally built images and no
	// registry: nothing is pulled.
	if err := os.WriteFile(path, []byte("imagePull: false\n"+config), 0o600); err != nil {
		t.Fatal(err)
	}
	sock, addr := filepath.Join(dir, "api.sock"), freePort(t)
	logb := &syncbuf.Buffer{}
	cmd := exec.Command(bin, "run", "--private-runtime", "--config", path, "--root-dir", filepath.Join(dir, "root"),
		"--api-socket", sock, "--metrics-addr", addr, "--log-level", "info")
	cmd.Stdout, cmd.Stderr = logb, logb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	client := api.NewClient(sock)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if l, err := client.List(cctx); err == nil {
			for _, p := range l.Items {
				client.Delete(cctx, p.Namespace, p.Name)
			}
			for cctx.Err() == nil {
				if l, err := client.List(cctx); err != nil || len(l.Items) == 0 {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		client.Close()
		cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("agent log:\n%s", logb.String())
		}
	})
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := client.List(ctx); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("API never came up; log:\n%s", logb.String())
		}
	}
	return client, addr, logb
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	io.Copy(&b, bufio.NewReader(resp.Body))
	return b.String()
}

// TestRunEvictsRightWhileTheRingsOverflow shrinks every ring to one page
// and the event queue to 16, floods the lifecycle ring with exits (a pod
// that starts 300 children and then kills them all in one kill(1) call,
// over and over, so that their exits come together however slowly the
// children were started), and lets a
// hog loose: the loss is counted
// in the metrics, and the eviction is still right, decided on snapshots
// and the tripwire.
func TestRunEvictsRightWhileTheRingsOverflow(t *testing.T) {
	cgtest.RequirePrivileged(t)
	mi, err := nodestats.ReadMeminfo(nodestats.MeminfoPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	client, addr, _ := startPrivateAgent(t, ctx, fmt.Sprintf(
		"systemReserved: {memory: %q}\neviction:\n  evictionHard: {memory.available: 100Mi}\nkernel:\n  ringSizeBytes: %d\n  queueSize: 16\n",
		fmt.Sprint(int64(mi.MemTotal)-512<<20), os.Getpagesize()))
	storm := `apiVersion: v1
kind: Pod
metadata: {name: storm}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - {name: c, image: registry.local/nodeguard/busybox:1.35, command: [sh, -c, "while true; do p=; for i in $(seq 300); do sleep 600 & p=\"$p $!\"; done; kill $p; wait; done"], resources: {requests: {memory: 16Mi}}}
`
	if _, err := client.Apply(ctx, []byte(storm), "test"); err != nil {
		t.Fatal(err)
	}
	lost := func() float64 {
		var n float64
		for _, l := range strings.Split(scrape(t, addr), "\n") {
			if strings.HasPrefix(l, "nodeguard_bpf_ring_lost_total{") {
				var v float64
				fmt.Sscan(l[strings.LastIndex(l, " ")+1:], &v)
				n += v
			}
		}
		return n
	}
	stormed := time.Now()
	for deadline := time.Now().Add(60 * time.Second); lost() == 0; time.Sleep(500 * time.Millisecond) {
		if time.Now().After(deadline) {
			for _, l := range strings.Split(scrape(t, addr), "\n") {
				if strings.HasPrefix(l, "nodeguard_bpf_") {
					t.Log(l)
				}
			}
			t.Fatal("the exit storm never overflowed a one-page ring")
		}
	}
	t.Logf("the first record was lost %v after the storm began", time.Since(stormed).Round(time.Millisecond))
	if _, err := client.Apply(ctx, []byte(evictPods), "test"); err != nil {
		t.Fatal(err)
	}
	var hog *corev1.Pod
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		hog, err = client.Get(ctx, "default", "hog")
		if err == nil && hog.Status.Reason == "Evicted" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hog was never evicted: %+v", hog.Status)
		}
	}
	for _, name := range []string{"steady", "idle-besteffort", "storm"} {
		if p, err := client.Get(ctx, "default", name); err != nil || p.Status.Phase != corev1.PodRunning {
			t.Errorf("collateral: %s (%v)", name, err)
		}
	}
	evs, _ := client.Events(ctx, 0, 0)
	for _, e := range evs {
		if e.Kind == "oom_kill" {
			t.Errorf("a kernel OOM kill: %s", e.Object)
		}
	}
	t.Logf("events lost while the rings overflowed: %.0f; hog evicted: %s", lost(), hog.Status.Message)
}
