package lifecycle_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle"
)

// swapBeforeCreate is a runtime that runs swap once, just before it
// creates the container named name: a pod's write into an allowed hostPath
// tree that lands between the volume set-up's check and the runtime's
// resolution of the mount's host path.
type swapBeforeCreate struct {
	lifecycle.Runtime
	name string
	once sync.Once
	swap func() error
	err  error
}

func (s *swapBeforeCreate) CreateContainer(ctx context.Context, sandboxID string, cfg *runtimeapi.ContainerConfig, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error) {
	if cfg.GetMetadata().GetName() == s.name {
		s.once.Do(func() { s.err = s.swap() })
	}
	return s.Runtime.CreateContainer(ctx, sandboxID, cfg, sandboxCfg)
}

const hostPathSwapPod = `
apiVersion: v1
kind: Pod
metadata: {name: swap}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - {name: d, hostPath: {path: HOSTDIR/d, type: Directory}}
  containers:
  - name: c
    image: BUSYBOX
    command: [sleep, "3600"]
    volumeMounts:
    - {name: d, mountPath: /d}
    - {name: d, mountPath: /ro, readOnly: true}
`

// The container sees the hostPath directory that was checked, though the
// directory was swapped for a symlink to a place outside the allowlist
// after the check and before containerd resolved the mount; a readOnly
// mount of it stays read-only; nothing is left once the pod is deleted.
func TestHostPathSwappedBeforeCreateContainerShowsTheCheckedDirectory(t *testing.T) {
	r := newRig(t)
	d := filepath.Join(r.hostDir, "d")
	outside := t.TempDir()
	for p, data := range map[string]string{filepath.Join(d, "which"): "original", filepath.Join(outside, "which"): "marker"} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var swapper *swapBeforeCreate
	r.runtime = func(rt lifecycle.Runtime) lifecycle.Runtime {
		swapper = &swapBeforeCreate{Runtime: rt, name: "c", swap: func() error {
			if err := os.Rename(d, d+".checked"); err != nil {
				return err
			}
			return os.Symlink(outside, d)
		}}
		return swapper
	}
	m, _ := r.manager(t)
	ctx := t.Context()
	if _, err := m.Apply(ctx, r.pods(t, strings.ReplaceAll(hostPathSwapPod, "HOSTDIR", r.hostDir)), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	waitPod(t, m, "swap", "ran", func(p *corev1.Pod) bool {
		return running(p) && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	})
	if swapper.err != nil {
		t.Fatalf("the swap: %v", swapper.err)
	}
	if target, err := os.Readlink(d); err != nil || target != outside {
		t.Fatalf("the hostPath is not the symlink to %s at CreateContainer: %q, %v", outside, target, err)
	}
	if out, errOut, code := r.exec(t, m, "swap", "c", "cat", "/d/which"); out != "original" || code != 0 {
		t.Errorf("the container's hostPath reads %q (stderr %q, exit %d), want the checked directory's %q", out, errOut, code, "original")
	}
	if _, errOut, code := r.exec(t, m, "swap", "c", "touch", "/ro/x"); code == 0 || !strings.Contains(errOut, "Read-only") {
		t.Errorf("write to the readOnly hostPath mount: exit %d, stderr %q; want a read-only file system error", code, errOut)
	}

	if err := m.Delete(ctx, "default", "swap"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := r.leftovers(t)
		if len(left) == 0 && r.sandboxes(t) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the pod's deletion, still left: %v (sandboxes %d)", left, r.sandboxes(t))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if b, err := os.ReadFile(filepath.Join(d+".checked", "which")); err != nil || string(b) != "original" {
		t.Errorf("the checked directory after the pod: %q, %v", b, err)
	}
}
