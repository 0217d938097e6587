package guard

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// sandboxList is a runtime's sandbox listing; a test changes it while an
// actor runs through update.
type sandboxList struct {
	mu  sync.Mutex
	sbs []*runtimeapi.PodSandbox
	err error
}

func (l *sandboxList) ListAllPodSandboxes(context.Context) ([]*runtimeapi.PodSandbox, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.sbs), l.err
}

// update changes the listing under its lock.
func (l *sandboxList) update(f func([]*runtimeapi.PodSandbox) []*runtimeapi.PodSandbox) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sbs = f(l.sbs)
}

func kubeletSandbox(id, uid, ns, name string, created int64, state runtimeapi.PodSandboxState, annotations map[string]string) *runtimeapi.PodSandbox {
	return &runtimeapi.PodSandbox{Id: id, State: state, CreatedAt: created, Annotations: annotations,
		Labels: map[string]string{cri.PodUIDLabel: uid, cri.PodNameLabel: name, cri.PodNamespaceLabel: ns}}
}

// The kubelet's pods are its ready sandboxes whose pod cgroup sits under
// kubepods, each with the QoS class its cgroup's place tells; nodeguard's
// own pods, sandboxes without the kubelet's labels or without a pod
// cgroup, and stopped ones are not.
func TestFinderFindsTheKubeletsPodsByTheirCgroups(t *testing.T) {
	cgtest.RequirePrivileged(t)
	root := cgtest.New(t)
	kube := root.Child(t, "kubepods")
	const (
		guaranteed = "0f1e2d3c-aaaa-bbbb-cccc-000000000001"
		burstable  = "0f1e2d3c-aaaa-bbbb-cccc-000000000002"
		besteffort = "0f1e2d3c-aaaa-bbbb-cccc-000000000003"
		static     = "0f1e2d3c-aaaa-bbbb-cccc-000000000004"
		ours       = "0f1e2d3c-aaaa-bbbb-cccc-000000000005"
		noCgroup   = "0f1e2d3c-aaaa-bbbb-cccc-000000000006"
	)
	kube.Child(t, "pod"+guaranteed)
	kube.Child(t, "pod"+static)
	kube.Child(t, "burstable").Child(t, "pod"+burstable)
	be := kube.Child(t, "besteffort")
	be.Child(t, "pod"+besteffort)
	be.Child(t, "pod"+ours)
	ready, notReady := runtimeapi.PodSandboxState_SANDBOX_READY, runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	nodeguards := kubeletSandbox("sb-ours", ours, "default", "ours", 1, ready, nil)
	nodeguards.Labels[cri.ManagedLabel] = "true"
	unlabelled := kubeletSandbox("sb-bare", besteffort, "default", "bare", 9, ready, nil)
	delete(unlabelled.Labels, cri.PodNameLabel)
	list := &sandboxList{sbs: []*runtimeapi.PodSandbox{
		kubeletSandbox("sb-g", guaranteed, "prod", "db", 1, ready, nil),
		kubeletSandbox("sb-b-old", burstable, "default", "web", 1, ready, nil),
		kubeletSandbox("sb-b", burstable, "default", "web", 2, ready, nil),
		kubeletSandbox("sb-b-stopped", burstable, "default", "web", 3, notReady, nil),
		kubeletSandbox("sb-be", besteffort, "default", "batch", 1, ready, nil),
		kubeletSandbox("sb-s", static, "kube-system", "etcd", 1, ready, map[string]string{ConfigSourceAnnotation: "file"}),
		kubeletSandbox("sb-none", noCgroup, "default", "gone", 1, ready, nil),
		nodeguards, unlabelled,
	}}
	f := &Finder{Runtime: list, Layout: root.Layout(), Driver: kubepods.Cgroupfs, Root: root.Rel()}
	got, err := f.Pods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cg := func(class corev1.PodQOSClass, uid string) string {
		n, err := kubepods.PodParent(kubepods.Cgroupfs, root.Rel(), class, types.UID(uid))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	want := []Pod{
		{UID: besteffort, Namespace: "default", Name: "batch", QOS: corev1.PodQOSBestEffort, Cgroup: cg(corev1.PodQOSBestEffort, besteffort), SandboxID: "sb-be"},
		{UID: burstable, Namespace: "default", Name: "web", QOS: corev1.PodQOSBurstable, Cgroup: cg(corev1.PodQOSBurstable, burstable), SandboxID: "sb-b"},
		{UID: static, Namespace: "kube-system", Name: "etcd", QOS: corev1.PodQOSGuaranteed, Cgroup: cg(corev1.PodQOSGuaranteed, static), SandboxID: "sb-s", Static: true},
		{UID: guaranteed, Namespace: "prod", Name: "db", QOS: corev1.PodQOSGuaranteed, Cgroup: cg(corev1.PodQOSGuaranteed, guaranteed), SandboxID: "sb-g"},
	}
	if len(got) != len(want) {
		t.Fatalf("found %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("pod %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// The runtime's error is the Finder's, named.
func TestFinderSaysWhenTheRuntimeFails(t *testing.T) {
	f := &Finder{Runtime: &sandboxList{err: errors.New("connection refused")}, Driver: kubepods.Cgroupfs, Root: "/"}
	if _, err := f.Pods(context.Background()); err == nil || err.Error() != "find the kubelet's pods: connection refused" {
		t.Fatalf("Pods: %v, want the runtime's error named", err)
	}
}
