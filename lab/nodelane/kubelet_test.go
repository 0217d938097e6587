//go:build nodelane

package nodelane

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/lab/nodevm"
)

// Bounds of the kubelet check, under TCG.
const (
	// kubeletRegisterBound: from systemd-run to the Node's first POST:
	// the kubelet's start (a 90 MB binary), its container manager and
	// cAdvisor's first housekeeping, the CRI's status.
	kubeletRegisterBound = 120 * time.Second
	// kubeletReadyBound: from registration to Ready: the runtime and its
	// network ready, the first PLEG relist, a status update (every 10 s).
	kubeletReadyBound = 120 * time.Second
	// kubeletPodsBound: the scheduler binds three pods once the node
	// controller removed the not-ready taint, and the kubelet starts
	// their sandboxes (2-7 s each under TCG, the first with CNI up to
	// 15 s) and containers, images present.
	kubeletPodsBound = 180 * time.Second
	// kubeletStopBound: systemctl stop of the kubelet (SIGTERM: it exits
	// at once) or of its slices.
	kubeletStopBound = 60 * time.Second
)

// The kubelet's files and unit on the lane's node, as kubeadm lays them
// out.
const (
	kubeletUnit = "kubelet.service"
	// kubeletRootDir is the kubelet's --root-dir (its default); its
	// configuration file goes there too, as kubeadm puts it.
	kubeletRootDir    = "/var/lib/kubelet"
	kubeletConfigPath = kubeletRootDir + "/config.yaml"
	// kubeletManifestDir is its staticPodPath: empty, as no static pod
	// is part of the check.
	kubeletManifestDir = "/etc/kubernetes/manifests"
	// kubeletPodLogs are the kubelet's pod and container log directories.
	kubeletPodLogs = "/var/log/pods"
	kubeletCtrLogs = "/var/log/containers"
)

// kubeletQoSPods are the pods of testdata/kubelet-qos.yaml, by the QoS
// class each must get.
var kubeletQoSPods = struct {
	File, Namespace string
	Names           map[corev1.PodQOSClass]string
}{
	File:      "testdata/kubelet-qos.yaml",
	Namespace: "lane",
	Names: map[corev1.PodQOSClass]string{
		corev1.PodQOSGuaranteed: "kubelet-guaranteed",
		corev1.PodQOSBurstable:  "kubelet-burstable",
		corev1.PodQOSBestEffort: "kubelet-besteffort",
	},
}

// kubeletNode is the lane's node while the real kubelet owns it
// (withKubelet): what a check running beside it needs.
type kubeletNode struct {
	// Kubeconfig is the guest admin's kubeconfig (system:masters), for
	// kubectl --kubeconfig.
	Kubeconfig string
	// Name is the Node's name: the kubelet's --hostname-override and its
	// client certificate's system:node:<Name>.
	Name string
	// Unit is the kubelet's systemd unit; Config its configuration file;
	// Values what that file was rendered from.
	Unit, Config string
	Values       KubeletValues
	// Pods are the pods that WaitRunning saw Running, by
	// "namespace/name", as last seen (UID, QoS class, IPs).
	Pods map[string]*corev1.Pod
}

// Kubectl runs kubectl as the guest's admin with args and returns its
// combined output.
func (k *kubeletNode) Kubectl(args ...string) (string, error) { return kube(args...) }

// Apply applies a manifest file with kubectl apply -f. The path must not
// contain a comma (kubectl splits -f at commas: t.TempDir() of a check
// named with commas has them; use os.MkdirTemp).
func (k *kubeletNode) Apply(t *testing.T, manifest string) {
	t.Helper()
	if strings.Contains(manifest, ",") {
		t.Fatalf("kubectl apply -f %s: kubectl would split the path at its comma", manifest)
	}
	if out, err := kube("apply", "-f", manifest); err != nil {
		t.Fatalf("kubectl apply -f %s: %v %s", manifest, err, out)
	}
}

// ApplyYAML writes manifest into a temporary file and applies it.
func (k *kubeletNode) ApplyYAML(t *testing.T, manifest string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "kubelet-apply-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	f := filepath.Join(dir, "manifest.yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	k.Apply(t, f)
}

// WaitRunning waits until each pod ("namespace/name") is Running, every
// container Ready, on this node, within bound, records it in k.Pods and
// returns them in order. It fails t with the pods' last state and the
// kubelet's journal otherwise.
func (k *kubeletNode) WaitRunning(t *testing.T, bound time.Duration, pods ...string) []*corev1.Pod {
	t.Helper()
	got := make([]*corev1.Pod, len(pods))
	if _, err := waitFor(fmt.Sprintf("%d pods Running on %s", len(pods), k.Name), bound, func() (bool, string, error) {
		var l corev1.PodList
		if err := kubeJSON(&l, "get", "pods", "-A", "--field-selector", "spec.nodeName="+k.Name); err != nil {
			return false, err.Error(), nil
		}
		by := map[string]*corev1.Pod{}
		for i := range l.Items {
			by[l.Items[i].Namespace+"/"+l.Items[i].Name] = &l.Items[i]
		}
		done := true
		for i, name := range pods {
			p := by[name]
			got[i] = p
			if p == nil || p.Status.Phase != corev1.PodRunning || !allReady(p) {
				done = false
			}
		}
		return done, describePods(&l), nil
	}); err != nil {
		t.Fatalf("%v; kubelet journal:\n%s", err, journalText(kubeletUnit, 30))
	}
	for _, p := range got {
		k.Pods[p.Namespace+"/"+p.Name] = p
	}
	return got
}

// UID returns the UID of a pod WaitRunning saw, "" for another.
func (k *kubeletNode) UID(namespace, name string) string {
	if p := k.Pods[namespace+"/"+name]; p != nil {
		return string(p.UID)
	}
	return ""
}

// RunQoSPods applies testdata/kubelet-qos.yaml (a Guaranteed, a
// Burstable and a BestEffort pod of the local busybox image, never
// pulled) and waits until the three run; it returns them by QoS class as
// the API reports it.
func (k *kubeletNode) RunQoSPods(t *testing.T) (map[corev1.PodQOSClass]*corev1.Pod, time.Duration) {
	t.Helper()
	ensureNamespace(t, kubeletQoSPods.Namespace)
	t0 := time.Now()
	k.Apply(t, kubeletQoSPods.File)
	var names []string
	for _, q := range []corev1.PodQOSClass{corev1.PodQOSGuaranteed, corev1.PodQOSBurstable, corev1.PodQOSBestEffort} {
		names = append(names, kubeletQoSPods.Namespace+"/"+kubeletQoSPods.Names[q])
	}
	pods := k.WaitRunning(t, kubeletPodsBound, names...)
	took := time.Since(t0)
	out := map[corev1.PodQOSClass]*corev1.Pod{}
	for _, p := range pods {
		out[p.Status.QOSClass] = p
	}
	return out, took
}

// ensureNamespace creates namespace ns unless it exists, and waits for
// its default ServiceAccount (the controller-manager makes it; the API
// refuses pods in the namespace until then).
func ensureNamespace(t *testing.T, ns string) {
	t.Helper()
	out, err := kube("create", "namespace", ns)
	if err != nil && !strings.Contains(out, "AlreadyExists") {
		t.Fatalf("kubectl create namespace %s: %v %s", ns, err, out)
	}
	if _, err := waitFor("the default ServiceAccount of namespace "+ns, kubectlBound, func() (bool, string, error) {
		out, err := kube("get", "serviceaccount", "-n", ns, "default", "-o", "name")
		return err == nil, out, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// withKubelet runs fn with the real kubelet (the control plane's build,
// v1.37.2) owning the lane's node, joined to the run's control plane.
//
// Before: nodeguard and the kubelet must never own the node at once, so
// nodeguard's pods go (its manifests removed, the rest through `nodeguard
// pod rm`) and nodeguard stops; what it left in containerd and
// kubepods.slice is removed. containerd's runc gets SystemdCgroup = true
// (the kubelet's cgroupDriver systemd needs it). The Node and Lease that
// node mode registered are deleted: the node's identity is fixed by its
// certificates (system:node:nodelane, a serving certificate for
// nodelane and 127.0.0.1), and a fresh registration leaves nothing of
// nodeguard's (its conditions, taints, capacity, endpoint) for the kubelet
// to inherit. Then the kubelet runs as a transient systemd unit
// (kubelet.service) with KubeletConfig and KubeletArgs, and the check
// plays the external cloud controller: the Node's addresses become
// InternalIP 127.0.0.1 (the only address the API server may dial) and the
// uninitialized taint goes. It waits until the Node is Ready.
//
// After fn (also when fn fails): every pod bound to the node is deleted
// through the API and waited for, the kubelet stops, the sandboxes and
// slices it left are removed (it removes the pod slices itself, never
// kubepods.slice or the QoS slices), its directories and the Node and
// Lease go, and nodeguard is started again as it was, with its
// manifests. fn must delete the controllers it made (a Deployment's pods
// would come back).
func (n *node) withKubelet(t *testing.T, fn func(k *kubeletNode)) {
	t.Helper()
	dir := nodevm.ClusterDir
	kubelet := filepath.Join(dir, nodevm.ClusterKubelet)
	if _, err := os.Stat(kubelet); errors.Is(err, fs.ErrNotExist) {
		t.Skipf("no control plane or kubelet on this run: make test-cluster boots the node with them (%s)", nodevm.EnvCluster)
	}
	port := clusterNet(t)
	name := nodevm.ClusterNodeName
	n.takeNode(t)

	setSystemdCgroup(t, true)
	info, err := crictl("info")
	if err != nil {
		t.Fatal(err)
	}
	systemd, runtime, _, err := RuncSystemdCgroup(info)
	if err != nil || !systemd {
		t.Fatalf("containerd's runtime %q: SystemdCgroup %v (%v), want true for the kubelet's systemd driver", runtime, systemd, err)
	}
	// The pod network is containerd's CNI configuration: nodeguard wrote
	// its conflist at start-up and leaves it; the kubelet writes none.
	nets, err := filepath.Glob(filepath.Join(nodevm.CNIConfDir, "*.conf*"))
	if err != nil || len(nets) == 0 {
		t.Fatalf("no CNI network in %s (%v): containerd's network would never be ready", nodevm.CNIConfDir, err)
	}

	t0 := time.Now()
	if out, err := kube("delete", "node", name, "--ignore-not-found"); err != nil {
		t.Fatalf("kubectl delete node %s: %v %s", name, err, out)
	}
	if out, err := kube("delete", "lease", "-n", "kube-node-lease", name, "--ignore-not-found"); err != nil {
		t.Fatalf("kubectl delete lease %s: %v %s", name, err, out)
	}
	deleted := time.Since(t0)

	v := KubeletValues{
		RuntimeEndpoint: RuntimeEndpoint, StaticPodPath: kubeletManifestDir, Port: port,
		ServingCert: filepath.Join(dir, nodevm.ClusterServingCert), ServingKey: filepath.Join(dir, nodevm.ClusterServingKey),
		ClientCA: filepath.Join(dir, nodevm.ClusterCA),
	}
	cfg, err := KubeletConfig(v)
	if err != nil {
		t.Fatal(err)
	}
	k := &kubeletNode{Kubeconfig: filepath.Join(dir, nodevm.ClusterAdminKubeconfig), Name: name, Unit: kubeletUnit,
		Config: kubeletConfigPath, Values: v, Pods: map[string]*corev1.Pod{}}
	t.Cleanup(func() { k.teardown(t, n) })
	for _, d := range []string{kubeletRootDir, kubeletManifestDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(kubeletConfigPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}

	// A transient unit, as a package's kubelet.service runs it but
	// without Restart=: an exit is the check's failure, not a loop.
	args := append([]string{"--unit=" + kubeletUnit, "--collect", "--description=kubelet (node lane)",
		"-p", "After=containerd.service", "-p", "Wants=containerd.service", kubelet},
		KubeletArgs(kubeletConfigPath, filepath.Join(dir, nodevm.ClusterNodeKubeconfig), name)...)
	t1 := time.Now()
	if out, err := run(startCmdBound, "systemd-run", args...); err != nil {
		t.Fatalf("systemd-run %s: %v %s", strings.Join(args, " "), err, out)
	}
	var nd corev1.Node
	failed := func() error {
		p, err := unitProps(kubeletUnit, "ActiveState", "Result")
		if err == nil && p["ActiveState"] != "active" && p["ActiveState"] != "activating" {
			return fmt.Errorf("%s is %s (result %s)", kubeletUnit, p["ActiveState"], p["Result"])
		}
		return nil
	}
	registered, err := waitFor("node "+name+" registered by the kubelet", kubeletRegisterBound, func() (bool, string, error) {
		if err := failed(); err != nil {
			return false, "", err
		}
		if err := kubeJSON(&nd, "get", "node", name); err != nil {
			return false, err.Error(), nil
		}
		return true, "", nil
	})
	if err != nil {
		t.Fatalf("%v; journal:\n%s", err, journalText(kubeletUnit, 40))
	}
	registeredWith := fmt.Sprint(nd.Status.Addresses)

	// The cloud controller's part: the addresses, then the taint.
	patch, err := AddressesPatch(GuestAddresses(name))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := kube("patch", "node", name, "--subresource=status", "--type=merge", "-p", patch); err != nil {
		t.Fatalf("kubectl patch node %s addresses: %v %s", name, err, out)
	}
	for _, tt := range nd.Spec.Taints {
		if tt.Key == TaintUninitialized {
			if out, err := kube("taint", "node", name, TaintUninitialized+"-"); err != nil {
				t.Fatalf("kubectl taint node %s %s-: %v %s", name, TaintUninitialized, err, out)
			}
		}
	}
	if _, err := waitFor("node "+name+" Ready", kubeletReadyBound, func() (bool, string, error) {
		if err := failed(); err != nil {
			return false, "", err
		}
		if err := kubeJSON(&nd, "get", "node", name); err != nil {
			return false, err.Error(), nil
		}
		for _, c := range nd.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, fmt.Sprintf("Ready=%s %s %s", c.Status, c.Reason, c.Message), nil
			}
		}
		return false, "no Ready condition", nil
	}); err != nil {
		t.Fatalf("%v; journal:\n%s", err, journalText(kubeletUnit, 40))
	}
	ready := time.Since(t1)
	p, _ := unitProps(kubeletUnit, "MainPID", "ControlGroup")
	ni := nd.Status.NodeInfo
	t.Logf("kubelet %s (%s, pid %s in %s) registered node %s %.1f s after systemd-run (with addresses %s) and was Ready %.1f s after it; stale Node and Lease deleted in %.1f s before; runtime %s, kernel %s, addresses %v, allocatable memory %s cpu %s, endpoint port %d",
		ni.KubeletVersion, kubeletUnit, p["MainPID"], p["ControlGroup"], name, registered.Seconds(), registeredWith, ready.Seconds(), deleted.Seconds(),
		ni.ContainerRuntimeVersion, ni.KernelVersion, nd.Status.Addresses, nd.Status.Allocatable.Memory(), nd.Status.Allocatable.Cpu(),
		nd.Status.DaemonEndpoints.KubeletEndpoint.Port)
	if want := "v1.37.2"; ni.KubeletVersion != want {
		t.Errorf("nodeInfo.kubeletVersion %q, want the payload's kubelet %s", ni.KubeletVersion, want)
	}
	if got := nd.Status.DaemonEndpoints.KubeletEndpoint.Port; got != int32(port) {
		t.Errorf("daemonEndpoints.kubeletEndpoint.Port %d, want %d", got, port)
	}
	if err := CheckNodeAddresses(nd.Status.Addresses); err != nil {
		t.Fatal(err)
	}
	fn(k)
}

// takeNode takes the node from nodeguard for the kubelet: nodeguard's
// pods deleted (its manifests moved aside, the others through `nodeguard
// pod rm`), nodeguard stopped, and any sandbox and kubepods.slice left
// removed. It registers putting the manifests back and starting nodeguard
// again with its configuration, when it was running.
func (n *node) takeNode(t *testing.T) {
	t.Helper()
	t0 := time.Now()
	active, _, _, err := agent()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	if active == "active" {
		manifests := map[string][]byte{}
		files, _ := filepath.Glob(filepath.Join(ManifestDir, "*"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			manifests[f] = b
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
		}
		values := n.values
		t.Cleanup(func() {
			t0 := time.Now()
			for f, b := range manifests {
				if err := os.WriteFile(f, b, 0o644); err != nil {
					t.Error(err)
				}
			}
			n.restartAgent(t, values)
			t.Logf("nodeguard started again as it was, with its %d manifests, %.1f s", len(manifests), time.Since(t0).Seconds())
		})
		l, err := listPods()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range l.Items {
			names = append(names, p.Namespace+"/"+p.Name)
			// A static pod goes with its file; pod rm may refuse it.
			_, _ = nodeguard(cmdTimeout, "pod", "rm", "-n", p.Namespace, p.Name)
		}
		if _, err := waitFor("nodeguard's pods gone", deleteBound, func() (bool, string, error) {
			l, err := listPods()
			if err != nil {
				return false, err.Error(), nil
			}
			return len(l.Items) == 0, describePods(l), nil
		}); err != nil {
			t.Fatalf("%v; journal:\n%s", err, journalText("nodeguard", 25))
		}
		if out, err := systemctl(startCmdBound, "stop", "nodeguard"); err != nil {
			t.Fatalf("systemctl stop nodeguard: %v %s", err, out)
		}
	}
	left := clearRuntime(t)
	t.Logf("nodeguard (%s) stopped, its %d pods %q deleted first, %.1f s; left in containerd and the cgroups and removed: %q",
		active, len(names), names, time.Since(t0).Seconds(), left)
}

// clearRuntime removes every sandbox containerd still has and stops
// kubepods.slice (with the QoS and pod slices beneath it), so that the
// next owner of the node starts clean; it returns what it removed.
func clearRuntime(t *testing.T) []string {
	t.Helper()
	var removed []string
	sbs, err := criPods()
	if err != nil {
		t.Error(err)
	}
	for _, sb := range sbs {
		removed = append(removed, "sandbox "+sb.ID[:12]+" "+sb.Metadata.Namespace+"/"+sb.Metadata.Name+" "+sb.State)
		if _, err := crictl("stopp", sb.ID); err != nil {
			t.Error(err)
		}
		if _, err := crictl("rmp", sb.ID); err != nil {
			t.Error(err)
		}
	}
	for _, s := range podSlices() {
		removed = append(removed, s)
	}
	if st, err := os.Stat("/sys/fs/cgroup/kubepods.slice"); err == nil && st.IsDir() {
		removed = append(removed, "/kubepods.slice")
		if out, err := systemctl(kubeletStopBound, "stop", "kubepods.slice"); err != nil {
			t.Errorf("systemctl stop kubepods.slice: %v %s", err, out)
		}
	}
	if _, err := waitFor("no sandbox and no kubepods.slice", sandboxGoneBound, func() (bool, string, error) {
		left := criLeft()
		if _, err := os.Stat("/sys/fs/cgroup/kubepods.slice"); err == nil {
			left = append(left, "/kubepods.slice")
		}
		return len(left) == 0, strings.Join(left, ", "), nil
	}); err != nil {
		t.Error(err)
	}
	return removed
}

// teardown ends what withKubelet started; see there.
func (k *kubeletNode) teardown(t *testing.T, n *node) {
	t0 := time.Now()
	var uids []string
	for _, p := range k.Pods {
		uids = append(uids, string(p.UID))
	}
	sel := "spec.nodeName=" + k.Name
	del := []string{"delete", "pods", "-A", "--field-selector", sel, "--wait=false"}
	if p, err := unitProps(kubeletUnit, "ActiveState"); err != nil || p["ActiveState"] != "active" {
		// No kubelet to stop the pods and confirm their deletion.
		del = append(del, "--force", "--grace-period=0")
	}
	if out, err := kube(del...); err != nil {
		t.Errorf("kubectl delete pods --field-selector %s: %v %s", sel, err, out)
	}
	if _, err := waitFor("every pod on "+k.Name+" gone from the API", deleteBound, func() (bool, string, error) {
		var l corev1.PodList
		if err := kubeJSON(&l, "get", "pods", "-A", "--field-selector", sel); err != nil {
			return false, err.Error(), nil
		}
		for _, p := range l.Items {
			uids = append(uids, string(p.UID))
		}
		return len(l.Items) == 0, describePods(&l), nil
	}); err != nil {
		t.Errorf("%v; kubelet journal:\n%s", err, journalText(kubeletUnit, 25))
	}
	podsGone := time.Since(t0)

	t1 := time.Now()
	if p, err := unitProps(kubeletUnit, "LoadState"); err == nil && p["LoadState"] == "loaded" {
		if out, err := systemctl(kubeletStopBound, "stop", kubeletUnit); err != nil {
			t.Errorf("systemctl stop %s: %v %s", kubeletUnit, err, out)
		}
	}
	stopped := time.Since(t1)
	cfg, _ := os.ReadFile(k.Config)
	saveOutput(t, "kubelet", map[string][]byte{"config.yaml": cfg, "journal.txt": []byte(journalText(kubeletUnit, 5000))})
	// What the kubelet left, before anything else is removed.
	var leftByKubelet []string
	for _, s := range podSlices() {
		leftByKubelet = append(leftByKubelet, "pod slice "+s)
	}
	for _, s := range []string{"/kubepods.slice", "/kubepods.slice/kubepods-burstable.slice", "/kubepods.slice/kubepods-besteffort.slice"} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", s)); err == nil {
			leftByKubelet = append(leftByKubelet, s)
		}
	}
	if sbs, err := criPods(); err == nil {
		for _, sb := range sbs {
			leftByKubelet = append(leftByKubelet, "sandbox "+sb.ID[:12]+" "+sb.State)
		}
	}
	clearRuntime(t)

	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Error(err)
	}
	mounts, err := MountsBelow(b, kubeletRootDir)
	if err != nil {
		t.Error(err)
	}
	slices.Reverse(mounts)
	for _, m := range mounts {
		leftByKubelet = append(leftByKubelet, "mount "+m)
		if out, err := run(cmdTimeout, "umount", m); err != nil {
			t.Errorf("umount %s: %v %s", m, err, out)
		}
	}
	for _, d := range []string{kubeletRootDir, "/etc/kubernetes", kubeletPodLogs, kubeletCtrLogs} {
		if err := os.RemoveAll(d); err != nil {
			t.Error(err)
		}
	}
	if out, err := kube("delete", "node", k.Name, "--ignore-not-found"); err != nil {
		t.Errorf("kubectl delete node %s: %v %s", k.Name, err, out)
	}
	if out, err := kube("delete", "lease", "-n", "kube-node-lease", k.Name, "--ignore-not-found"); err != nil {
		t.Errorf("kubectl delete lease %s: %v %s", k.Name, err, out)
	}

	left := map[string][]string{
		"pod slices":               podSlices(),
		"cri-containerd scopes":    scopes(),
		"cgroups named after pods": podCgroupDirs(uids),
		"veths":                    veths(),
		"IP leases":                leases(n.ipamDir()),
		"sandboxes or containers":  criLeft(),
	}
	if _, err := os.Stat(kubeletRootDir); err == nil {
		left["the kubelet's root dir"] = []string{kubeletRootDir}
	}
	if p, err := unitProps(kubeletUnit, "LoadState", "ActiveState"); err == nil && p["ActiveState"] != "inactive" {
		left["the kubelet's unit"] = []string{fmt.Sprint(p)}
	}
	for _, what := range slices.Sorted(maps.Keys(left)) {
		if len(left[what]) > 0 {
			t.Errorf("left after the kubelet check: %s: %s", what, strings.Join(left[what], ", "))
		}
	}
	t.Logf("after: %d pods deleted through the API in %.1f s, the kubelet stopped in %.1f s; it left %q, removed; the Node and Lease deleted; %.1f s in all",
		len(k.Pods), podsGone.Seconds(), stopped.Seconds(), leftByKubelet, time.Since(t0).Seconds())
}

// podTimeline says when, after its creation, the API server saw a pod
// scheduled, its container started and the pod Ready: the API server's
// clock for all, to the second (the guest's clock is not the host's).
func podTimeline(p *corev1.Pod) string {
	at := func(tm time.Time) string {
		if tm.IsZero() {
			return "-"
		}
		return fmt.Sprintf("+%ds", int(tm.Sub(p.CreationTimestamp.Time).Seconds()))
	}
	var scheduled, ready, started time.Time
	for _, c := range p.Status.Conditions {
		switch c.Type {
		case corev1.PodScheduled:
			scheduled = c.LastTransitionTime.Time
		case corev1.PodReady:
			ready = c.LastTransitionTime.Time
		}
	}
	for _, c := range p.Status.ContainerStatuses {
		if r := c.State.Running; r != nil {
			started = r.StartedAt.Time
		}
	}
	return "scheduled " + at(scheduled) + ", started " + at(started) + ", Ready " + at(ready)
}

// kubeletGet asks the kubelet's server on the guest's loopback for path
// with kubectl get --raw and the credentials of kubeconfig, verifying the
// kubelet's serving certificate (of the cluster's CA) for nodeName.
func kubeletGet(kubeconfig, nodeName string, port int, path string) (string, error) {
	return run(kubectlBound, filepath.Join(nodevm.ClusterDir, nodevm.ClusterKubectl), "--kubeconfig", kubeconfig,
		"--cache-dir", "/tmp/kubectl-cache", "--server", "https://127.0.0.1:"+strconv.Itoa(port), "--tls-server-name", nodeName,
		"get", "--raw", path)
}

// anonymousGet asks the kubelet's server for path with no credentials
// and returns the HTTP status. It does not verify the server: only the
// status matters, and nothing is sent.
func anonymousGet(port int, path string) (int, error) {
	c := &http.Client{Timeout: cmdTimeout, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer c.CloseIdleConnections()
	resp, err := c.Get("https://127.0.0.1:" + strconv.Itoa(port) + path)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// criSandboxAnnotations is a sandbox of `crictl pods -o json` with its
// annotations, which CRISandbox leaves out.
type criSandboxAnnotations struct {
	ID          string            `json:"id"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
}

// kubelet: the real kubelet on the lane's node. withKubelet starts it
// (and says how its Node registered and went Ready); then a Guaranteed, a
// Burstable and a BestEffort pod applied with kubectl run; each pod's
// cgroup is the kubelet's systemd slice for its class beneath
// kubepods.slice, with the pod-level memory.max the kubelet sets, and its
// container in a cri-containerd scope there; each sandbox carries the
// kubelet's labels and annotations and not nodeguard's; the kubelet's
// /configz and a pod's log come through the API server and its
// webhook-authorized endpoint.
func (n *node) kubelet(t *testing.T) {
	n.withKubelet(t, func(k *kubeletNode) {
		pods, took := k.RunQoSPods(t)
		var desc []string
		for _, q := range []corev1.PodQOSClass{corev1.PodQOSGuaranteed, corev1.PodQOSBurstable, corev1.PodQOSBestEffort} {
			p := pods[q]
			if p == nil || p.Name != kubeletQoSPods.Names[q] {
				t.Fatalf("no pod of QoS class %s among %v (want %s)", q, slices.Collect(maps.Keys(pods)), kubeletQoSPods.Names[q])
			}
			desc = append(desc, fmt.Sprintf("%s %s uid %s IP %s (%s)", p.Name, q, p.UID, p.Status.PodIP, podTimeline(p)))
			if p.Status.HostIP != "127.0.0.1" {
				t.Errorf("%s: hostIP %q, want the Node's InternalIP 127.0.0.1", p.Name, p.Status.HostIP)
			}
		}
		t.Logf("3 pods Running and Ready %.1f s after kubectl apply, images present (imagePullPolicy Never): %s", took.Seconds(), strings.Join(desc, "; "))

		// The kubelet's pod cgroups, by class.
		limits := map[corev1.PodQOSClass]string{corev1.PodQOSGuaranteed: "33554432", corev1.PodQOSBurstable: "67108864", corev1.PodQOSBestEffort: "max"}
		for _, q := range []corev1.PodQOSClass{corev1.PodQOSGuaranteed, corev1.PodQOSBurstable, corev1.PodQOSBestEffort} {
			p := pods[q]
			slice, err := PodSlice(q, string(p.UID))
			if err != nil {
				t.Fatal(err)
			}
			memMax, err := cgroupFile(slice, "memory.max")
			if err != nil {
				t.Errorf("%s: its pod cgroup: %v", p.Name, err)
				continue
			}
			if memMax != limits[q] {
				t.Errorf("%s: %s memory.max %s, want %s", p.Name, slice, memMax, limits[q])
			}
			cs, err := podContainers(string(p.UID))
			if err != nil || len(cs) != 1 {
				t.Errorf("%s: %d containers (%v), want 1", p.Name, len(cs), err)
				continue
			}
			pid, err := containerPID(cs[0].ID)
			if err != nil {
				t.Error(err)
				continue
			}
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
			if err != nil {
				t.Error(err)
				continue
			}
			want, _ := ContainerScope(q, string(p.UID), cs[0].ID)
			if got := strings.TrimPrefix(strings.TrimSpace(string(b)), "0::"); got != want {
				t.Errorf("%s: container pid %d in %s, want %s", p.Name, pid, got, want)
			}
			cpuMax, _ := cgroupFile(slice, "cpu.max")
			t.Logf("%s (%s): pod cgroup %s, memory.max %s, cpu.max %q; container pid %d in %s", p.Name, q, slice, memMax, cpuMax, pid, filepath.Base(want))
		}

		// The sandboxes, as the kubelet labels them.
		out, err := crictl("pods", "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var sbs struct {
			Items []criSandboxAnnotations `json:"items"`
		}
		if err := json.Unmarshal(out, &sbs); err != nil {
			t.Fatalf("parse crictl pods -o json: %v", err)
		}
		for _, q := range []corev1.PodQOSClass{corev1.PodQOSGuaranteed, corev1.PodQOSBurstable, corev1.PodQOSBestEffort} {
			p := pods[q]
			var ready []criSandboxAnnotations
			for _, s := range sbs.Items {
				if s.Labels[LabelPodUID] == string(p.UID) && s.State == "SANDBOX_READY" {
					ready = append(ready, s)
				}
			}
			if len(ready) != 1 {
				t.Errorf("%s: %d ready sandboxes labelled %s=%s, want 1", p.Name, len(ready), LabelPodUID, p.UID)
				continue
			}
			s := ready[0]
			if s.Labels[LabelPodName] != p.Name || s.Labels[LabelPodNamespace] != p.Namespace || s.Labels["app"] != "kubelet-qos" {
				t.Errorf("%s: sandbox %.12s labels %v", p.Name, s.ID, s.Labels)
			}
			if v, ok := s.Labels["nodeguard.io/managed"]; ok {
				t.Errorf("%s: sandbox %.12s has nodeguard's label nodeguard.io/managed=%s", p.Name, s.ID, v)
			}
			if src := s.Annotations["kubernetes.io/config.source"]; src != "api" {
				t.Errorf("%s: sandbox %.12s annotation kubernetes.io/config.source %q, want api", p.Name, s.ID, src)
			}
			t.Logf("%s: sandbox %.12s labels %s=%s %s=%s %s=%s app=%s, annotation kubernetes.io/config.source=%s", p.Name, s.ID,
				LabelPodName, s.Labels[LabelPodName], LabelPodNamespace, s.Labels[LabelPodNamespace], LabelPodUID, s.Labels[LabelPodUID],
				s.Labels["app"], s.Annotations["kubernetes.io/config.source"])
		}

		// The kubelet's server: its configuration in effect (/configz),
		// asked directly at its port by three callers, which only
		// Webhook authorization and no anonymous access tell apart. The
		// API server's node proxy refuses a loopback Node address
		// ("address not allowed"), so /configz cannot come through it.
		t2 := time.Now()
		dir := nodevm.ClusterDir
		raw, err := kubeletGet(filepath.Join(dir, nodevm.ClusterAdminKubeconfig), k.Name, k.Values.Port, "/configz")
		if err != nil {
			t.Fatalf("the kubelet's /configz as the guest's admin: %v", err)
		}
		cz, err := ParseConfigz([]byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ConfigzMismatches(cz, k.Values) {
			t.Errorf("the kubelet's /configz: %s", m)
		}
		asNode, err := kubeletGet(filepath.Join(dir, nodevm.ClusterNodeKubeconfig), k.Name, k.Values.Port, "/configz")
		if err == nil || !strings.Contains(asNode, "Forbidden") {
			t.Errorf("the kubelet's /configz as system:node:%s: %v %q, want Forbidden (the API server's SubjectAccessReview denies it)", k.Name, err, tail(asNode, 3))
		}
		anonymous, err := anonymousGet(k.Values.Port, "/configz")
		if err != nil || anonymous != http.StatusUnauthorized {
			t.Errorf("the kubelet's /configz without credentials: status %d (%v), want 401", anonymous, err)
		}
		t3 := time.Now()
		g := pods[corev1.PodQOSGuaranteed]
		logs, err := kube("logs", "-n", g.Namespace, g.Name)
		if err != nil || !strings.Contains(logs, g.Name+" running") {
			t.Errorf("kubectl logs %s: %v %q", g.Name, err, logs)
		}
		t.Logf("the kubelet's server at port %d: /configz as the admin (%.1f s) says cgroupDriver %s, cgroupRoot %s, evictionHard %v, authorization %s, anonymous %v; as system:node:%s %q; without credentials HTTP %d; kubectl logs %s through the API server %q (%.1f s)",
			k.Values.Port, t3.Sub(t2).Seconds(), cz.CgroupDriver, cz.CgroupRoot, cz.EvictionHard, cz.Authorization.Mode, deref(cz.Authentication.Anonymous.Enabled),
			k.Name, firstLine(asNode), anonymous, g.Name, strings.TrimSpace(logs), time.Since(t3).Seconds())

		// Guard mode beside it (guard_test.go), on the same pods.
		n.guardBeside(t, k, pods)
	})
}
