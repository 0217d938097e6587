package cri

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/lab/crienv"
	"github.com/nodeguard/nodeguard/lifecycle/logs"
	"github.com/nodeguard/nodeguard/lifecycle/podspec"
	"github.com/nodeguard/nodeguard/qos"
)

// strictPodYAML asks for supplementalGroupsPolicy Strict: the container's
// groups are its runAsGroup and supplementalGroups only, none from the
// image's /etc/group.
const strictPodYAML = `
apiVersion: v1
kind: Pod
metadata: {name: strict, namespace: cri-test}
spec:
  restartPolicy: Never
  dnsPolicy: Default
  terminationGracePeriodSeconds: 1
  securityContext:
    runAsUser: 1000
    runAsGroup: 3000
    supplementalGroups: [4000]
    supplementalGroupsPolicy: Strict
  containers:
  - name: id
    image: %s
    command: [id, -G]
`

// TestSupplementalGroupsPolicyIsDecidedByTheRuntime asks the real runtime
// for its features and admits a Strict pod only where it reports
// supplemental_groups_policy: there the container runs with exactly the
// pod's groups and its status reports the identity; elsewhere (containerd
// 1.6 on this host) the refusal is the kubelet's and names the runtime's
// lack.
func TestSupplementalGroupsPolicyIsDecidedByTheRuntime(t *testing.T) {
	e := crienv.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), podTimeout)
	defer cancel()
	c, err := Dial(ctx, e.Endpoint(), 10*time.Second)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()
	features, err := c.Features(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := podspec.Parse(strings.NewReader(fmt.Sprintf(strictPodYAML, e.BusyboxImage())), "strict.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pod := pods[0]
	_, errs := podspec.Validate(pod, podspec.Options{SupplementalGroupsPolicy: features.GetSupplementalGroupsPolicy()})

	if !features.GetSupplementalGroupsPolicy() {
		t.Logf("the runtime does not report supplemental_groups_policy (features %v)", features)
		want := "spec.securityContext.supplementalGroupsPolicy: Forbidden: SupplementalGroupsPolicyNotSupported: " +
			"SupplementalGroupsPolicy=Strict is not supported in this node: the container runtime does not report the supplemental_groups_policy feature"
		if len(errs) != 1 || errs[0].Error() != want {
			t.Fatalf("Validate = %v, want the one refusal %q", errs, want)
		}
		return
	}
	if len(errs) > 0 {
		t.Fatalf("the runtime reports the feature, yet Validate refuses: %v", errs.ToAggregate())
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
	ctr := &pod.Spec.Containers[0]
	imageID, err := c.EnsureImage(ctx, e.BusyboxImage(), ctr.ImagePullPolicy, p.sandboxCfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ContainerConfig(pod, ctr, ContainerOptions{Image: imageID})
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
		t.Fatalf("id exited %+v", s)
	}
	waitLog(ctx, t, filepath.Join(logDir, cfg.LogPath), logs.Options{Tail: -1}, "3000 4000\n")
	raw, err := c.ContainerStatus(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	u := ContainerUser(raw)
	if u == nil {
		t.Fatal("the runtime reports supplemental_groups_policy but no user in the container's status")
	}
	groups := slices.Sorted(slices.Values(u.Linux.SupplementalGroups))
	if u.Linux.UID != 1000 || u.Linux.GID != 3000 || !slices.Equal(groups, []int64{3000, 4000}) {
		t.Errorf("status user = %+v, want uid 1000 gid 3000 groups [3000 4000]", *u.Linux)
	}
}
