package lifecycle_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/lifecycle"
)

// rootImagePod asks busybox, whose image names no user and so runs as
// root, to run as non-root: refused at start, as the kubelet does. asuser,
// the same image with a runAsUser, passes the check (cri's unit test) and
// starts all the same (syncloop_test.go).
const rootImagePod = `
apiVersion: v1
kind: Pod
metadata: {name: nonroot, uid: nonroot-uid}
spec:
  terminationGracePeriodSeconds: 1
  securityContext: {runAsNonRoot: true}
  containers:
  - {name: asroot, image: BUSYBOX, command: [sleep, "3600"]}
  - name: asuser
    image: BUSYBOX
    command: [sleep, "3600"]
    securityContext: {runAsUser: 1000}
`

func TestRunAsNonRootRefusesAnImageThatRunsAsRoot(t *testing.T) {
	r := newRig(t)
	m, _ := r.manager(t)
	ctx := context.Background()
	if _, err := m.Apply(ctx, r.pods(t, rootImagePod), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	status := func(p *corev1.Pod, name string) *corev1.ContainerStatus {
		for i := range p.Status.ContainerStatuses {
			if p.Status.ContainerStatuses[i].Name == name {
				return &p.Status.ContainerStatuses[i]
			}
		}
		return nil
	}
	want := `container has runAsNonRoot and image will run as root (pod: "nonroot_default(nonroot-uid)", container: asroot)`
	p := waitPod(t, m, "nonroot", "refused asroot", func(p *corev1.Pod) bool {
		cs := status(p, "asroot")
		return cs != nil && cs.State.Waiting != nil && cs.State.Waiting.Reason == lifecycle.ReasonCreateContainerConfigError
	})
	if w := status(p, "asroot").State.Waiting; !strings.Contains(w.Message, want) {
		t.Errorf("asroot waiting message %q, want the kubelet's %q", w.Message, want)
	}
	if p.Status.Phase != corev1.PodPending {
		t.Errorf("phase %s, want Pending", p.Status.Phase)
	}
	// Nothing ran as root: the refusal comes before CreateContainer.
	ctx2, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := r.client.ListContainers(ctx2, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range list {
		if c.GetMetadata().GetName() == "asroot" {
			t.Errorf("container asroot was created (%s)", c.Id)
		}
	}
	if err := m.Delete(ctx, "default", "nonroot"); err != nil {
		t.Fatal(err)
	}
	waitGone(t, m, "nonroot")
}

// fsGroupPod writes into an emptyDir as uid 1000 with fsGroup 2000.
const fsGroupPod = `
apiVersion: v1
kind: Pod
metadata: {name: fsgroup}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  securityContext: {runAsUser: 1000, runAsGroup: 3000, fsGroup: 2000, fsGroupChangePolicy: OnRootMismatch}
  volumes: [{name: data, emptyDir: {}}]
  containers:
  - name: writer
    image: BUSYBOX
    command: [sh, -c, 'echo "groups=$(id -G | tr " " ,) root=$(stat -c %g:%A /data)"; mkdir /data/d; touch /data/d/f; echo "file=$(stat -c %g /data/d/f)"']
    volumeMounts: [{name: data, mountPath: /data}]
`

func TestFSGroupOwnsTheVolumeAndIsASupplementalGroup(t *testing.T) {
	r := newRig(t)
	m, _ := r.manager(t)
	ctx := context.Background()
	if _, err := m.Apply(ctx, r.pods(t, fsGroupPod), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	waitPod(t, m, "fsgroup", "succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	var out strings.Builder
	if err := m.Logs(ctx, "default", "fsgroup", lifecycle.LogOptions{Container: "writer", Tail: -1}, &out); err != nil {
		t.Fatal(err)
	}
	t.Logf("writer saw: %s", out.String())
	// The kubelet's order: the primary group, then fsGroup, then the
	// supplemental groups. The root is group 2000, setgid (the 's' in the
	// group's execute place), so what the container makes is 2000's too.
	for _, want := range []string{"groups=3000,2000 ", "root=2000:drwxrwsrwx", "file=2000"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("writer's output %q lacks %q", out.String(), want)
		}
	}
	if err := m.Delete(ctx, "default", "fsgroup"); err != nil {
		t.Fatal(err)
	}
	waitGone(t, m, "fsgroup")
}

// strictPod runs `id -G` with supplementalGroupsPolicy Strict: its groups
// are runAsGroup and supplementalGroups only.
const strictPod = `
apiVersion: v1
kind: Pod
metadata: {name: strict}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  securityContext:
    runAsUser: 1000
    runAsGroup: 3000
    supplementalGroups: [4000]
    supplementalGroupsPolicy: Strict
  containers:
  - {name: id, image: BUSYBOX, command: [id, -G]}
`

// TestSupplementalGroupsPolicyStrictFollowsTheRuntime gives the manager
// the real runtime's features, as the daemon does: where the runtime does
// not report supplemental_groups_policy (containerd 1.6, this host) the
// Strict pod is refused at admission with the kubelet's reason; where it
// does, the pod runs with exactly its groups and its status reports them.
func TestSupplementalGroupsPolicyStrictFollowsTheRuntime(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	features, err := r.client.Features(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r.podOptions.SupplementalGroupsPolicy = features.GetSupplementalGroupsPolicy()
	m, _ := r.manager(t)
	_, err = m.Apply(ctx, r.pods(t, strictPod), lifecycle.SourceAPI)
	if !features.GetSupplementalGroupsPolicy() {
		want := "SupplementalGroupsPolicyNotSupported: SupplementalGroupsPolicy=Strict is not supported in this node: the container runtime does not report the supplemental_groups_policy feature"
		// Refused with the field's path like the other fields the node
		// cannot honour (sysctls, AppArmor), the kubelet's reason first.
		if !errors.Is(err, lifecycle.ErrInvalid) || !strings.Contains(err.Error(), "spec.securityContext.supplementalGroupsPolicy: Forbidden: "+want) {
			t.Fatalf("Apply = %v, want ErrInvalid with %q", err, want)
		}
		if _, ok := m.Get("default", "strict"); ok {
			t.Error("a rejected pod is desired")
		}
		t.Logf("the runtime reports no supplemental_groups_policy: %v", err)
		return
	}
	if err != nil {
		t.Fatalf("the runtime reports supplemental_groups_policy, yet Apply = %v", err)
	}
	p := waitPod(t, m, "strict", "succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	var out strings.Builder
	if err := m.Logs(ctx, "default", "strict", lifecycle.LogOptions{Container: "id", Tail: -1}, &out); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out.String()); got != "3000 4000" {
		t.Errorf("id -G = %q, want \"3000 4000\": none of the image's /etc/group", got)
	}
	if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].User == nil {
		t.Fatalf("status has no user: %+v", p.Status.ContainerStatuses)
	}
	if u := p.Status.ContainerStatuses[0].User.Linux; u == nil || u.UID != 1000 || u.GID != 3000 {
		t.Errorf("status user.linux = %+v, want uid 1000 gid 3000", u)
	}
	if err := m.Delete(ctx, "default", "strict"); err != nil {
		t.Fatal(err)
	}
	waitGone(t, m, "strict")
}
