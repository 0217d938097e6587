// Package guard is nodeguard beside a kubelet (nodeguard guard): the
// kubelet runs the pods, nodeguard senses and decides as nodeguard run
// does, and acts on the kubelet's pods through their cgroups and the API
// server. This file finds those pods on the node.
package guard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// ConfigSourceAnnotation is the annotation the kubelet gives a pod with
// where it came from; "file" (its manifest directory) and "http" make a
// static pod, which its IsCriticalPod never evicts.
const ConfigSourceAnnotation = "kubernetes.io/config.source"

// Pod is one of the kubelet's pods as guard mode finds it on the node.
type Pod struct {
	UID             types.UID
	Namespace, Name string
	// QOS is told by where the kubelet put the pod's cgroup.
	QOS corev1.PodQOSClass
	// Cgroup is the pod cgroup's name as kubepods.PodParent spells it
	// for the kubelet's driver and cgroup root.
	Cgroup string
	// SandboxID is its newest ready sandbox.
	SandboxID string
	// Static: the kubelet's manifest directory or URL made it.
	Static bool
}

// Sandboxes lists every sandbox of the runtime, whoever made it
// (cri.Client.ListAllPodSandboxes).
type Sandboxes interface {
	ListAllPodSandboxes(ctx context.Context) ([]*runtimeapi.PodSandbox, error)
}

// Finder finds the kubelet's pods: the ready sandboxes in the runtime
// that carry the kubelet's pod labels (uid, name, namespace) and not
// nodeguard's own ManagedLabel, each with the pod cgroup the kubelet made
// for it beneath kubepods. The pod's QoS class is the one whose place
// holds that cgroup (kubepods itself for Guaranteed, kubepods/burstable,
// kubepods/besteffort), as the kubelet's pod container manager puts it.
// A sandbox with no such cgroup is not one of the kubelet's pods (or
// not yet, or no more), and is left out: guard mode acts on nothing
// outside kubepods.
type Finder struct {
	Runtime Sandboxes
	Layout  *cgroups.Layout
	// Driver and Root are the kubelet's cgroupDriver and cgroupRoot
	// ("/" on a node; relative in tests, beneath the test's cgroup).
	Driver kubepods.Driver
	Root   string
}

// classes in the order a pod's cgroup is looked for.
var classes = []corev1.PodQOSClass{corev1.PodQOSBurstable, corev1.PodQOSBestEffort, corev1.PodQOSGuaranteed}

// Pods lists the kubelet's pods, by namespace and name.
func (f *Finder) Pods(ctx context.Context) ([]Pod, error) {
	sbs, err := f.Runtime.ListAllPodSandboxes(ctx)
	if err != nil {
		return nil, fmt.Errorf("find the kubelet's pods: %w", err)
	}
	newest := map[types.UID]*runtimeapi.PodSandbox{}
	for _, sb := range sbs {
		l := sb.GetLabels()
		uid := types.UID(l[cri.PodUIDLabel])
		if sb.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY || uid == "" || l[cri.PodNameLabel] == "" ||
			l[cri.PodNamespaceLabel] == "" || l[cri.ManagedLabel] != "" {
			continue
		}
		if cur, ok := newest[uid]; !ok || sb.GetCreatedAt() > cur.GetCreatedAt() {
			newest[uid] = sb
		}
	}
	var out []Pod
	for uid, sb := range newest {
		class, cg, err := f.podCgroup(uid)
		if err != nil {
			return nil, err
		}
		if cg == "" {
			continue
		}
		l := sb.GetLabels()
		src := sb.GetAnnotations()[ConfigSourceAnnotation]
		out = append(out, Pod{UID: uid, Namespace: l[cri.PodNamespaceLabel], Name: l[cri.PodNameLabel], QOS: class,
			Cgroup: cg, SandboxID: sb.GetId(), Static: src == "file" || src == "http"})
	}
	slices.SortFunc(out, func(a, b Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.UID, b.UID))
	})
	return out, nil
}

// podCgroup finds the pod's cgroup in the memory hierarchy: the class
// whose PodParent exists, or "" when none does.
func (f *Finder) podCgroup(uid types.UID) (corev1.PodQOSClass, string, error) {
	for _, class := range classes {
		name, err := kubepods.PodParent(f.Driver, f.Root, class, uid)
		if err != nil {
			// Not a UID the kubelet could have named a cgroup with.
			return "", "", nil
		}
		d, err := f.Layout.Memory.Resolve(name)
		if err != nil {
			return "", "", fmt.Errorf("pod %s: %w", uid, err)
		}
		switch _, err := os.Stat(d.Path); {
		case err == nil:
			return class, name, nil
		case !errors.Is(err, fs.ErrNotExist):
			return "", "", fmt.Errorf("pod %s: %w", uid, err)
		}
	}
	return "", "", nil
}
