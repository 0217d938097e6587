package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/nodeguard/nodeguard/internal/cgroups"
	"github.com/nodeguard/nodeguard/internal/crienv"
	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// TestRunSurvivesSIGKILLMidReconcile kills `nodeguard run` with SIGKILL at
// several points while it starts pods, restarts it each time, and checks
// that it adopts every pod without a duplicate sandbox, then that deleting
// them leaves no sandbox, container or pod cgroup.
// envConfig writes a run configuration whose network is the private
// containerd's: nodeguard checks and collects that network and never
// writes into the host's /etc/cni/net.d.
func envConfig(t *testing.T, env *crienv.Env, dir string) string {
	t.Helper()
	nc := env.NetworkConfig()
	b, err := yaml.Marshal(map[string]any{"network": map[string]any{
		"manage": false, "name": nc.Name, "bridge": nc.Bridge, "subnet": nc.Subnet.String(),
		"cniBinDirs": nc.BinDirs, "cniConfDir": nc.ConfDir, "ipamDir": nc.IPAMDir,
		"nodeNetNS": env.NetNS(), "netnsDirs": []string{env.NetNSDir()},
	}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRunSurvivesSIGKILLMidReconcile(t *testing.T) {
	env := crienv.New(t)
	bin := buildBinary(t)
	dir, err := os.MkdirTemp("", "ngcrash")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "api.sock")
	root := env.CgroupParent() + "/ng"
	config := envConfig(t, env, dir)
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "run", "--config", config, "--runtime-endpoint", env.Endpoint(), "--cgroup-root", root,
			"--root-dir", filepath.Join(dir, "state"), "--api-socket", sock, "--metrics-addr", "", "--log-level", "warn")
		var logb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &logb, &logb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	client := api.NewClient(sock)
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	waitAPI := func() {
		for deadline := time.Now().Add(20 * time.Second); ; {
			if _, err := client.List(ctx); err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("API never came up")
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	manifest := func(i int) []byte {
		return []byte(fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: crash-%d}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - {name: c, image: %s, command: [sleep, "3600"]}
`, i, env.BusyboxImage()))
	}

	const trials, pods = 6, 3
	cmd := start()
	waitAPI()
	for trial := 0; trial < trials; trial++ {
		for i := 0; i < pods; i++ {
			if _, err := client.Apply(ctx, manifest(trial*pods+i), "crash-test"); err != nil {
				t.Fatal(err)
			}
		}
		// Kill it while it is starting them: a different point each trial.
		time.Sleep(time.Duration(50+trial*120) * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		cmd = start()
		waitAPI()
	}
	total := trials * pods
	for deadline := time.Now().Add(60 * time.Second); ; {
		list, err := client.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		running := 0
		for _, p := range list.Items {
			if p.Status.Phase == "Running" {
				running++
			}
		}
		if running == total {
			break
		}
		if time.Now().After(deadline) {
			for _, p := range list.Items {
				t.Logf("%s: %s %s %s", p.Name, p.Status.Phase, p.Status.Reason, p.Status.Message)
			}
			t.Fatalf("%d of %d pods running after %d SIGKILLs", running, total, trials)
		}
		time.Sleep(200 * time.Millisecond)
	}
	rt, err := cri.Dial(ctx, env.Endpoint(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	sbs, err := rt.ListPodSandbox(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(sbs) != total {
		t.Errorf("%d sandboxes for %d pods after %d SIGKILLs: duplicates or leaks", len(sbs), total, trials)
	}
	for i := 0; i < total; i++ {
		if err := client.Delete(ctx, "default", fmt.Sprintf("crash-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(60 * time.Second); ; {
		sbs, err = rt.ListPodSandbox(ctx, nil)
		if err == nil && len(sbs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sandboxes left after deleting every pod", len(sbs))
		}
		time.Sleep(200 * time.Millisecond)
	}
	ctrs, err := rt.ListContainers(ctx, "", nil)
	if err != nil || len(ctrs) != 0 {
		t.Errorf("%d containers left (%v)", len(ctrs), err)
	}
	layout, err := cgroups.Discover()
	if err != nil {
		t.Fatal(err)
	}
	dirs, err := layout.Resolve(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		_ = filepath.WalkDir(d.Path, func(p string, de os.DirEntry, err error) error {
			if err == nil && de.IsDir() && strings.HasPrefix(de.Name(), "pod") {
				t.Errorf("pod cgroup left: %s", p)
			}
			return nil
		})
	}
	t.Logf("%d SIGKILLs during reconcile: %d pods adopted, %d sandboxes, nothing left after deletion", trials, total, total)
}
