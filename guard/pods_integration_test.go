package guard_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/guard"
	"github.com/nodeguard/nodeguard/lab/crienv"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/lifecycle/podspec"
	"github.com/nodeguard/nodeguard/qos"
)

// Against a real containerd: sandboxes made as the kubelet makes them
// (its labels, the pod cgroup beneath kubepods as its cgroupfs driver
// names it) are found with their QoS class; nodeguard's own sandbox, in
// the same kubepods, is not; a sandbox the kubelet stopped is not.
func TestFinderFindsSandboxesTheKubeletMade(t *testing.T) {
	env := crienv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := cri.Dial(ctx, env.Endpoint(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() }) // after the sandboxes' removal
	layout, err := cgroups.Discover()
	if err != nil {
		t.Fatal(err)
	}
	pods, err := podspec.Parse(strings.NewReader(strings.ReplaceAll(`
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop}
spec:
  containers:
  - {name: main, image: BUSYBOX, resources: {requests: {memory: 16Mi}}}
---
apiVersion: v1
kind: Pod
metadata: {name: batch, namespace: shop}
spec:
  containers:
  - {name: main, image: BUSYBOX}
---
apiVersion: v1
kind: Pod
metadata: {name: stopped, namespace: shop}
spec:
  containers:
  - {name: main, image: BUSYBOX}
---
apiVersion: v1
kind: Pod
metadata: {name: ours, namespace: shop}
spec:
  containers:
  - {name: main, image: BUSYBOX}
`, "BUSYBOX", env.BusyboxImage())), "kubelet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubepods.Name(kubepods.Cgroupfs, env.CgroupParent())
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
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
		if pod.Name != "ours" {
			// The kubelet's: its labels, not nodeguard's mark.
			delete(cfg.Labels, cri.ManagedLabel)
		}
		id, err := c.RunPodSandbox(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ids[pod.Name] = id
		t.Cleanup(func() {
			cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = c.StopPodSandbox(cctx, id)
			if err := c.RemovePodSandbox(cctx, id); err != nil {
				t.Errorf("remove sandbox %s: %v", id, err)
			}
		})
	}
	t.Cleanup(func() {
		if err := env.RemoveCgroup(kube); err != nil {
			t.Errorf("remove %s: %v", kube, err)
		}
	})
	if err := c.StopPodSandbox(ctx, ids["stopped"]); err != nil {
		t.Fatal(err)
	}
	f := &guard.Finder{Runtime: c, Layout: layout, Driver: kubepods.Cgroupfs, Root: env.CgroupParent()}
	got, err := f.Pods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]corev1.PodQOSClass{"batch": corev1.PodQOSBestEffort, "web": corev1.PodQOSBurstable}
	if len(got) != len(want) {
		t.Fatalf("found %+v, want batch and web alone", got)
	}
	for _, p := range got {
		if p.Namespace != "shop" || want[p.Name] != p.QOS || p.SandboxID != ids[p.Name] || p.Static {
			t.Errorf("found %+v, want %s/%s %s in sandbox %s", p, "shop", p.Name, want[p.Name], ids[p.Name])
		}
	}
}
