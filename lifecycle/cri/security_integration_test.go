package cri

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/lab/crienv"
	"github.com/nodeguard/nodeguard/lifecycle/logs"
	"github.com/nodeguard/nodeguard/lifecycle/podspec"
	"github.com/nodeguard/nodeguard/qos"
)

// securityPodYAML asks for what the security context can make visible
// from inside a container. probe: its ids and groups, the pod's safe
// sysctls, the capabilities left after CoreDNS's lower-case drop of "all",
// the seccomp mode, and a read-only root filesystem (/tmp is writable by
// uid 1000 otherwise). localhost: a Localhost seccomp profile that denies
// mkdir.
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
    image: %[1]s
    command: [sh, -c]
    args:
    - >-
      echo "uid=$(id -u) gid=$(id -g)"; echo "groups=$(id -G | tr ' ' ,)";
      echo "port_start=$(cat /proc/sys/net/ipv4/ip_unprivileged_port_start)";
      echo "shm_rmid_forced=$(cat /proc/sys/kernel/shm_rmid_forced)";
      if touch /tmp/x 2>/dev/null; then echo rootfs=rw; else echo rootfs=ro; fi;
      grep -E '^(CapEff|CapPrm|CapBnd|Seccomp):' /proc/self/status | tr -d '\t' | tr : =
    securityContext:
      runAsNonRoot: true
      readOnlyRootFilesystem: true
      capabilities: {drop: [all]}
      seccompProfile: {type: RuntimeDefault}
  - name: localhost
    image: %[1]s
    command: [sh, -c]
    args:
    - >-
      if mkdir /tmp/d 2>/dev/null; then echo mkdir=ok; else echo mkdir=denied; fi;
      grep '^Seccomp:' /proc/self/status | tr -d '\t' | tr : =
    securityContext:
      seccompProfile: {type: Localhost, localhostProfile: nomkdir.json}
`

// noMkdirProfile allows everything but mkdir(2) and mkdirat(2), which fail
// with EPERM.
const noMkdirProfile = `{"defaultAction": "SCMP_ACT_ALLOW",
 "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO"}]}`

// TestSecurityContextInsideTheContainer runs securityPodYAML through
// SandboxConfig and ContainerConfig on a real containerd and reads what
// each container saw from its log.
func TestSecurityContextInsideTheContainer(t *testing.T) {
	e := crienv.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), podTimeout)
	defer cancel()
	c, err := Dial(ctx, e.Endpoint(), 10*time.Second)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()
	seccompRoot := SeccompProfileRoot(t.TempDir())
	if err := os.MkdirAll(seccompRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(seccompRoot, "nomkdir.json"), []byte(noMkdirProfile), 0o644); err != nil {
		t.Fatal(err)
	}

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
	// run starts container ctr and returns the key=value lines of its log.
	run := func(t *testing.T, ctr *corev1.Container) map[string]string {
		t.Helper()
		// runAsNonRoot is decided by runAsUser 1000, not by busybox's
		// root user.
		if err := VerifyRunAsNonRoot(pod, ctr, img); err != nil {
			t.Fatalf("VerifyRunAsNonRoot: %v", err)
		}
		cfg, err := ContainerConfig(pod, ctr, ContainerOptions{Image: imageID, EnforceCPULimits: true, SeccompProfileRoot: seccompRoot})
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
			t.Fatalf("%s exited %+v", ctr.Name, s)
		}
		// The runtime copies the container's output to its log on its
		// own schedule: the last line can land after the exit is seen.
		var out strings.Builder
		logPath := filepath.Join(logDir, cfg.LogPath)
		deadline := time.Now().Add(waitTimeout)
		for {
			out.Reset()
			err := logs.Read(ctx, logPath, logs.Options{Tail: -1}, &out)
			if err == nil && strings.Contains(out.String(), "Seccomp=") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("log %s: %q (%v)", logPath, out.String(), err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("%s saw:\n%s", ctr.Name, out.String())
		seen := map[string]string{}
		for _, f := range strings.Fields(out.String()) {
			if k, v, ok := strings.Cut(f, "="); ok {
				seen[k] = v
			}
		}
		return seen
	}
	type want struct{ key, value, why string }
	check := func(t *testing.T, seen map[string]string, wants []want) {
		t.Helper()
		for _, w := range wants {
			if got := seen[w.key]; got != w.value {
				t.Errorf("%s = %q, want %q (%s)", w.key, got, w.value, w.why)
			}
		}
	}

	t.Run("the probe runs as its users and groups, with the pod's sysctls, no capabilities and RuntimeDefault seccomp", func(t *testing.T) {
		check(t, run(t, &pod.Spec.Containers[0]), []want{
			{"uid", "1000", "runAsUser"},
			{"gid", "3000", "runAsGroup"},
			{"groups", "3000,4000,5000", "the primary group, then supplementalGroups"},
			{"port_start", "80", "a safe net sysctl of the pod"},
			{"shm_rmid_forced", "1", "a safe kernel sysctl written with slashes"},
			{"rootfs", "ro", "readOnlyRootFilesystem"},
			{"CapEff", "0000000000000000", "drop: [all]"},
			{"CapPrm", "0000000000000000", "drop: [all]"},
			{"CapBnd", "0000000000000000", "drop: [all]"},
			{"Seccomp", "2", "seccompProfile RuntimeDefault is a filter (mode 2)"},
		})
	})
	t.Run("a Localhost seccomp profile beneath the profile root is applied", func(t *testing.T) {
		check(t, run(t, &pod.Spec.Containers[1]), []want{
			{"mkdir", "denied", "the profile fails mkdir"},
			{"Seccomp", "2", "a filter"},
		})
	})

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
