package cri

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/internal/crienv"
	"github.com/nodeguard/nodeguard/lifecycle/logs"
	"github.com/nodeguard/nodeguard/lifecycle/podspec"
	"github.com/nodeguard/nodeguard/lifecycle/qos"
)

// securityPodYAML asks for what the security context can make visible
// from inside a container: its ids and groups, a safe sysctl of the pod,
// the capabilities left after CoreDNS's lower-case drop of "all", and the
// seccomp mode.
const securityPodYAML = `
apiVersion: v1
kind: Pod
metadata: {name: secctx, namespace: cri-test}
spec:
  restartPolicy: Never
  dnsPolicy: Default
  terminationGracePeriodSeconds: 1
  securityContext:
    runAsUser: 1000
    runAsGroup: 3000
    supplementalGroups: [4000, 5000]
    sysctls:
    - {name: net.ipv4.ip_unprivileged_port_start, value: "80"}
    - {name: kernel/shm_rmid_forced, value: "1"}
  containers:
  - name: probe
    image: %s
    command: [sh, -c]
    args:
    - >-
      echo "uid=$(id -u) gid=$(id -g) groups=$(id -G)";
      echo "port_start=$(cat /proc/sys/net/ipv4/ip_unprivileged_port_start)";
      echo "shm_rmid_forced=$(cat /proc/sys/kernel/shm_rmid_forced)";
      grep -E '^(CapEff|CapPrm|CapBnd|Seccomp):' /proc/self/status
    securityContext:
      runAsNonRoot: true
      capabilities: {drop: [all]}
      seccompProfile: {type: RuntimeDefault}
`

// TestSecurityContextInsideTheContainer runs securityPodYAML through
// SandboxConfig and ContainerConfig on a real containerd and reads what
// the container saw from its log.
func TestSecurityContextInsideTheContainer(t *testing.T) {
	e := crienv.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), podTimeout)
	defer cancel()
	c, err := Dial(ctx, e.Endpoint(), 10*time.Second)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()

	pods, err := podspec.Parse(strings.NewReader(fmt.Sprintf(securityPodYAML, e.BusyboxImage())), "secctx.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pod := pods[0]
	if _, errs := podspec.Validate(pod, podspec.Options{}); len(errs) > 0 {
		t.Fatalf("the test pod is invalid: %v", errs.ToAggregate())
	}
	parent, err := kubepods.PodParent(kubepods.Cgroupfs, e.CgroupParent(), qos.Class(pod), pod.UID)
	if err != nil {
		t.Fatal(err)
	}
	logDir := filepath.Join(e.PodsDir(), pod.Namespace+"_"+pod.Name+"_"+string(pod.UID))
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := &runningPod{pod: pod, podParent: parent, containers: map[string]string{}}
	p.sandboxCfg = SandboxConfig(pod, SandboxOptions{CgroupParent: parent, LogDir: logDir})
	if p.sandboxID, err = c.RunPodSandbox(ctx, p.sandboxCfg); err != nil {
		t.Fatalf("%v\ncontainerd log:\n%s", err, tail(e.LogFile()))
	}
	t.Cleanup(func() { bestEffortRemove(e, c, p) })

	imageID, err := c.EnsureImage(ctx, e.BusyboxImage(), pod.Spec.Containers[0].ImagePullPolicy, p.sandboxCfg)
	if err != nil {
		t.Fatal(err)
	}
	img, err := c.ImageStatus(ctx, imageID)
	if err != nil {
		t.Fatal(err)
	}
	ctr := &pod.Spec.Containers[0]
	// runAsNonRoot is decided by runAsUser 1000, not by busybox's root user.
	if err := VerifyRunAsNonRoot(pod, ctr, img); err != nil {
		t.Fatalf("VerifyRunAsNonRoot: %v", err)
	}
	cfg, err := ContainerConfig(pod, ctr, ContainerOptions{Image: imageID, EnforceCPULimits: true})
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.CreateContainer(ctx, p.sandboxID, cfg, p.sandboxCfg)
	if err != nil {
		t.Fatalf("%v\ncontainerd log:\n%s", err, tail(e.LogFile()))
	}
	p.containers[ctr.Name] = id
	if err := c.StartContainer(ctx, id); err != nil {
		t.Fatalf("%v\ncontainerd log:\n%s", err, tail(e.LogFile()))
	}
	if s := waitExited(ctx, t, c, id); s.ExitCode != 0 {
		t.Fatalf("probe exited %+v", s)
	}
	// The runtime copies the container's output to its log on its own
	// schedule: the last line can land after the exit is reported.
	var out strings.Builder
	logPath := filepath.Join(logDir, cfg.LogPath)
	deadline := time.Now().Add(waitTimeout)
	for {
		out.Reset()
		err := logs.Read(ctx, logPath, logs.Options{Tail: -1}, &out)
		if err == nil && strings.Contains(out.String(), "Seccomp:") {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			t.Fatalf("log %s: %q (%v); raw %q", logPath, out.String(), err, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("probe saw:\n%s", out.String())
	seen := map[string]string{}
	for _, line := range strings.Split(out.String(), "\n") {
		for _, f := range strings.Fields(strings.ReplaceAll(line, ":\t", "=")) {
			if k, v, ok := strings.Cut(f, "="); ok {
				seen[k] = v
			}
		}
		if k, v, ok := strings.Cut(line, "groups="); ok && k != "" {
			seen["groups"] = v
		}
	}
	for _, want := range []struct{ key, value, why string }{
		{"uid", "1000", "runAsUser"},
		{"gid", "3000", "runAsGroup"},
		{"groups", "3000 4000 5000", "the primary group, then supplementalGroups"},
		{"port_start", "80", "a safe net sysctl of the pod"},
		{"shm_rmid_forced", "1", "a safe kernel sysctl written with slashes"},
		{"CapEff", "0000000000000000", `drop: [all]`},
		{"CapPrm", "0000000000000000", `drop: [all]`},
		{"CapBnd", "0000000000000000", `drop: [all]`},
		{"Seccomp", "2", "seccompProfile RuntimeDefault is a filter (mode 2)"},
	} {
		if got := seen[want.key]; got != want.value {
			t.Errorf("%s = %q, want %q (%s)", want.key, got, want.value, want.why)
		}
	}

	if err := c.StopPodSandbox(ctx, p.sandboxID); err != nil {
		t.Fatal(err)
	}
	if err := c.RemovePodSandbox(ctx, p.sandboxID); err != nil {
		t.Fatal(err)
	}
	kubeCg, err := kubepods.Name(kubepods.Cgroupfs, e.CgroupParent())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.RemoveCgroup(kubeCg); err != nil {
		t.Fatal(err)
	}
}
