//go:build nodelane

package nodelane

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/lab/nodevm"
)

var strictPod = podRef{Namespace: "lane", Name: "strict-groups", File: "testdata/strict-groups.yaml", QOS: corev1.PodQOSBurstable}

// strictGroups runs a pod with supplementalGroupsPolicy Strict on a
// runtime that reports the supplemental_groups_policy feature (containerd
// 2.x): admitted, its container has exactly the pod's groups, and
// status.containerStatuses[].user.linux is what the runtime reports.
// Debian's containerd 1.6 reports no features; there the refusal is the
// host lane's TestSupplementalGroupsPolicyIsDecidedByTheRuntime
// (lifecycle/cri), on the host's 1.6.
func (n *node) strictGroups(t *testing.T) {
	if n.runtime != nodevm.ContainerdV2 {
		t.Skipf("containerd %s reports no supplemental_groups_policy feature (CRI Status features), so nodeguard refuses Strict there: "+
			"the host lane's TestSupplementalGroupsPolicyIsDecidedByTheRuntime checks that refusal", n.runtime)
	}
	n.ensureAgent(t)
	if out, err := applyPods(strictPod.File); err != nil {
		t.Fatalf("nodeguard pod apply -f %s: %v %s", strictPod.File, err, out)
	}
	defer deletePod(t, strictPod)
	pod := waitPodRunning(t, strictPod, podsBound)
	cs, err := podContainers(string(pod.UID))
	if err != nil || len(cs) != 1 {
		t.Fatalf("the pod's running containers: %v (%v)", cs, err)
	}
	// id with no flag: crictl would take a flag after the id for its own.
	out, err := crictl("exec", cs[0].ID, "id")
	if err != nil {
		t.Fatalf("crictl exec id: %v", err)
	}
	if got := strings.Fields(string(out)); !slices.Contains(got, "groups=3000,4000") {
		t.Errorf("the container's id is %q, want groups=3000,4000: runAsGroup and supplementalGroups, none from the image's /etc/group", out)
	}
	if len(pod.Status.ContainerStatuses) != 1 || pod.Status.ContainerStatuses[0].User == nil || pod.Status.ContainerStatuses[0].User.Linux == nil {
		t.Fatalf("status.containerStatuses has no user.linux: %+v", pod.Status.ContainerStatuses)
	}
	u := pod.Status.ContainerStatuses[0].User.Linux
	groups := slices.Sorted(slices.Values(u.SupplementalGroups))
	if u.UID != 1000 || u.GID != 3000 || !slices.Equal(groups, []int64{3000, 4000}) {
		t.Errorf("status user.linux = %+v, want uid 1000 gid 3000 supplementalGroups [3000 4000]", *u)
	}
	t.Logf("Strict admitted; the container's id %q, status user.linux %+v", strings.TrimSpace(string(out)), *u)
}
