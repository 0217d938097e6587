//go:build nodelane

package nodelane

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/lab/images"
	"github.com/nodeguard/nodeguard/lab/nodevm"
)

// Bounds of the node-mode check, under TCG.
const (
	// apiReachBound: qemu's forward to the host's API server answers once
	// the guest's interface is up.
	apiReachBound = 30 * time.Second
	// nodeReadyBound: nodeguard restarted in node mode registers its Node
	// and posts Ready (1.3 s on the host; the guest is 5-10 times slower).
	nodeReadyBound = 90 * time.Second
	// clusterPodsBound: the scheduler binds a Deployment's two pods, the
	// informer hands them to nodeguard, their sandboxes start (2-7 s
	// each under TCG, the first with CNI up to 15 s).
	clusterPodsBound = 180 * time.Second
	// kubectlBound bounds one kubectl call: its start alone is a few
	// seconds under TCG.
	kubectlBound = 60 * time.Second
	// notReadyBound: the control plane's node-monitor-grace-period (40 s,
	// set by the runner) and the node controller's 5 s monitor period.
	notReadyBound = 90 * time.Second
)

// clusterDeployment is the check's Deployment: two Burstable replicas that
// say hello on their log.
var clusterDeployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: lane}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: c
        image: ` + images.BusyboxName + `
        imagePullPolicy: Never
        command: [sh, -c, "echo hello from the node lane; exec sleep 3600"]
        resources:
          requests: {cpu: 10m, memory: 16Mi}
          limits: {memory: 64Mi}
`

// kubectlArgs is the payload's kubectl as the guest's admin, with args.
func kubectlArgs(args ...string) (string, []string) {
	dir := nodevm.ClusterDir
	return filepath.Join(dir, nodevm.ClusterKubectl),
		append([]string{"--kubeconfig", filepath.Join(dir, nodevm.ClusterAdminKubeconfig), "--cache-dir", "/tmp/kubectl-cache"}, args...)
}

// kube runs kubectl with args and returns its combined output.
func kube(args ...string) (string, error) {
	name, a := kubectlArgs(args...)
	return run(kubectlBound, name, a...)
}

// kubeJSON runs kubectl get ... -o json into v.
func kubeJSON(v any, args ...string) error {
	name, a := kubectlArgs(append(args, "-o", "json")...)
	out, err := stdout(kubectlBound, name, a...)
	if err != nil {
		return err
	}
	return json.Unmarshal(out, v)
}

// clusterNet gives the guest its address in qemu's user network (taken
// away again when t ends), waits until the API server answers through
// qemu's forward, and returns the node endpoint's port (the host's
// 127.0.0.1:<port> comes in at the guest's <port>).
func clusterNet(t *testing.T) int {
	t.Helper()
	// The guest's address in qemu's user network; the forward to the API
	// server is the only place it reaches. udev loads virtio_net for the
	// device; the modprobe makes sure.
	_, _ = run(10*time.Second, "modprobe", "virtio_net")
	nic, err := guestNIC()
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"addr", "replace", "10.0.2.15/24", "dev", nic}, {"link", "set", nic, "up"}} {
		if out, err := run(10*time.Second, "ip", args...); err != nil {
			t.Fatalf("ip %s: %v %s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() {
		_, _ = run(10*time.Second, "ip", "addr", "flush", "dev", nic)
		_, _ = run(10*time.Second, "ip", "link", "set", nic, "down")
	})
	// qemu answers the TCP handshake itself: only an answer from the API
	// server says the relay reached it.
	if _, err := waitFor("the API server's /readyz through qemu's forward", apiReachBound, func() (bool, string, error) {
		out, err := kube("get", "--raw", "/readyz")
		return err == nil && strings.TrimSpace(out) == "ok", out, nil
	}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(nodevm.ClusterDir, nodevm.ClusterPort))
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("the node endpoint's port %q: %v", b, err)
	}
	return port
}

// guestNIC returns the guest's one network device (the virtio one qemu
// gives a cluster run): an interface backed by a device, not a virtual
// one.
func guestNIC() (string, error) {
	es, err := os.ReadDir("/sys/class/net")
	if err != nil {
		return "", err
	}
	for _, e := range es {
		if _, err := os.Stat(filepath.Join("/sys/class/net", e.Name(), "device")); err == nil {
			return e.Name(), nil
		}
	}
	return "", errors.New("no network device in /sys/class/net (qemu gives one to a cluster run only)")
}

// nodeMode: nodeguard, as installed and run by systemd on the lane's node
// (pure cgroup v2, containerd as its own service, the systemd driver),
// restarted with a kubeconfig, joins a real control plane the runner
// started on the host's loopback: its Node registers and goes Ready, a
// Deployment's pods are bound to it and run in the pod slices, kubectl
// logs and exec reach them through the API server and nodeguard's HTTPS
// endpoint, a runaway pod is evicted before the kernel OOM killer and the
// API shows it Failed/Evicted, and the Node goes NotReady once nodeguard
// stops. nodeguard is started standalone again after.
func (n *node) nodeMode(t *testing.T) {
	dir := nodevm.ClusterDir
	if _, err := os.Stat(filepath.Join(dir, nodevm.ClusterNodeKubeconfig)); errors.Is(err, fs.ErrNotExist) {
		t.Skipf("no control plane on this run: make test-cluster boots the node with one (%s)", nodevm.EnvCluster)
	}
	requireAgent(t)
	standalone := n.values
	t.Cleanup(func() { n.restartAgent(t, standalone) })
	port := clusterNet(t)

	// Node mode, with the kubelet's keys: the Node's InternalIP is
	// 127.0.0.1, where the API server reaches the endpoint (qemu forwards
	// the host's 127.0.0.1:port to the guest's port).
	v := standalone
	v.Set = append(append([]Setting(nil), standalone.Set...),
		Setting{Path: []string{"kubeconfig"}, Value: filepath.Join(dir, nodevm.ClusterNodeKubeconfig)},
		Setting{Path: []string{"nodeName"}, Value: nodevm.ClusterNodeName},
		Setting{Path: []string{"nodeIP"}, Value: "127.0.0.1"},
		Setting{Path: []string{"port"}, Value: port},
		Setting{Path: []string{"tlsCertFile"}, Value: filepath.Join(dir, nodevm.ClusterServingCert)},
		Setting{Path: []string{"tlsPrivateKeyFile"}, Value: filepath.Join(dir, nodevm.ClusterServingKey)},
		Setting{Path: []string{"authentication", "x509", "clientCAFile"}, Value: filepath.Join(dir, nodevm.ClusterCA)},
	)
	t0 := time.Now()
	n.restartAgent(t, v)
	node := nodevm.ClusterNodeName
	var nd corev1.Node
	took, err := waitFor("node "+node+" Ready", nodeReadyBound, func() (bool, string, error) {
		if err := kubeJSON(&nd, "get", "node", node); err != nil {
			return false, err.Error(), nil
		}
		for _, c := range nd.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, fmt.Sprintf("Ready=%s %s", c.Status, c.Message), nil
			}
		}
		return false, "no Ready condition", nil
	})
	if err != nil {
		t.Fatalf("%v; journal:\n%s", err, journalText("nodeguard", 30))
	}
	t.Logf("node %s Ready %.1f s after systemctl restart (%.1f s of waiting): runtime %s, kernel %s, allocatable memory %s, endpoint port %d",
		node, time.Since(t0).Seconds(), took.Seconds(), nd.Status.NodeInfo.ContainerRuntimeVersion, nd.Status.NodeInfo.KernelVersion,
		nd.Status.Allocatable.Memory(), nd.Status.DaemonEndpoints.KubeletEndpoint.Port)
	if !strings.HasPrefix(nd.Status.NodeInfo.ContainerRuntimeVersion, "containerd://") {
		t.Errorf("nodeInfo.containerRuntimeVersion %q, want containerd://...", nd.Status.NodeInfo.ContainerRuntimeVersion)
	}
	if got := nd.Status.DaemonEndpoints.KubeletEndpoint.Port; got != int32(port) {
		t.Errorf("daemonEndpoints.kubeletEndpoint.Port %d, want %d", got, port)
	}

	// A Deployment bound to the node by the scheduler.
	if out, err := kube("create", "namespace", "lane"); err != nil && !strings.Contains(out, "AlreadyExists") {
		t.Fatalf("kubectl create namespace: %v %s", err, out)
	}
	// Not beneath t.TempDir(): kubectl -f splits its argument at the
	// commas the check's name puts there.
	mdir, err := os.MkdirTemp("", "node-mode-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(mdir) })
	manifest := filepath.Join(mdir, "web.yaml")
	if err := os.WriteFile(manifest, []byte(clusterDeployment), 0o644); err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	if out, err := kube("apply", "-f", manifest); err != nil {
		t.Fatalf("kubectl apply: %v %s", err, out)
	}
	var pods corev1.PodList
	took, err = waitFor("the Deployment's 2 pods Running on "+node, clusterPodsBound, func() (bool, string, error) {
		if err := kubeJSON(&pods, "get", "pods", "-n", "lane", "-l", "app=web"); err != nil {
			return false, err.Error(), nil
		}
		running := 0
		var seen []string
		for _, p := range pods.Items {
			seen = append(seen, p.Name+"="+string(p.Status.Phase)+"@"+p.Spec.NodeName)
			if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName == node && allReady(&p) {
				running++
			}
		}
		return running == 2 && len(pods.Items) == 2, strings.Join(seen, " "), nil
	})
	if err != nil {
		t.Fatalf("%v; journal:\n%s", err, journalText("nodeguard", 30))
	}
	t.Logf("the Deployment's 2 pods Running and Ready %.1f s after kubectl apply", took.Seconds())
	out, _ := kube("get", "pods", "-n", "lane", "-o", "wide")
	t.Logf("kubectl get pods -o wide:\n%s", out)

	// The real layout: each pod in its systemd slice beneath
	// kubepods.slice, its containers in cri-containerd scopes.
	for _, p := range pods.Items {
		uid := strings.ReplaceAll(string(p.UID), "-", "_")
		slice := "/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid + ".slice"
		es, err := os.ReadDir(slice)
		if err != nil {
			t.Errorf("pod %s: its slice: %v", p.Name, err)
			continue
		}
		scopes := 0
		for _, e := range es {
			if e.IsDir() && strings.HasPrefix(e.Name(), "cri-containerd-") && strings.HasSuffix(e.Name(), ".scope") {
				scopes++
			}
		}
		if scopes == 0 {
			t.Errorf("pod %s: no cri-containerd scope in %s", p.Name, slice)
		}
	}

	// kubectl logs and exec: the API server dials the Node's InternalIP
	// and endpoint port, through qemu's forward, with its client
	// certificate; nodeguard authorizes it with a SubjectAccessReview.
	pod := pods.Items[0].Name
	t3 := time.Now()
	logs, err := kube("logs", "-n", "lane", pod)
	if err != nil || !strings.Contains(logs, "hello from the node lane") {
		t.Errorf("kubectl logs %s: %v %q", pod, err, logs)
	}
	t4 := time.Now()
	exec, err := kube("exec", "-n", "lane", pod, "--", "sh", "-c", "echo exec $((6*7))")
	if err != nil || !strings.Contains(exec, "exec 42") {
		t.Errorf("kubectl exec %s: %v %q", pod, err, exec)
	}
	t.Logf("through the API server and the node endpoint: kubectl logs %q (%.1f s), kubectl exec %q (%.1f s)",
		strings.TrimSpace(logs), t4.Sub(t3).Seconds(), strings.TrimSpace(exec), time.Since(t4).Seconds())

	// A runaway pod evicted before the kernel OOM killer, as the API
	// sees it.
	if out, err := kube("delete", "deployment", "-n", "lane", "web", "--wait=false"); err != nil {
		t.Errorf("kubectl delete deployment: %v %s", err, out)
	}
	n.clusterEvict(t)

	// Every pod gone from the node and the API.
	if _, err := waitFor("the namespace's pods gone", deleteBound, func() (bool, string, error) {
		var l corev1.PodList
		if err := kubeJSON(&l, "get", "pods", "-n", "lane"); err != nil {
			return false, err.Error(), nil
		}
		if len(l.Items) > 0 {
			_, _ = kube("delete", "pods", "-n", "lane", "--all", "--wait=false")
		}
		return len(l.Items) == 0, fmt.Sprintf("%d pods", len(l.Items)), nil
	}); err != nil {
		t.Error(err)
	}
	t.Logf("the Deployment's pods %.1f s from kubectl apply to gone", time.Since(t1).Seconds())

	// nodeguard stops: the node controller marks the Node NotReady.
	t2 := time.Now()
	if out, err := systemctl(startCmdBound, "stop", "nodeguard"); err != nil {
		t.Fatalf("systemctl stop nodeguard: %v %s", err, out)
	}
	if _, err := waitFor("node "+node+" NotReady", notReadyBound, func() (bool, string, error) {
		if err := kubeJSON(&nd, "get", "node", node); err != nil {
			return false, err.Error(), nil
		}
		for _, c := range nd.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status != corev1.ConditionTrue, fmt.Sprintf("Ready=%s %s", c.Status, c.Reason), nil
			}
		}
		return false, "no Ready condition", nil
	}); err != nil {
		t.Error(err)
	} else {
		t.Logf("node %s NotReady %.1f s after systemctl stop (node-monitor-grace-period 40 s)", node, time.Since(t2).Seconds())
	}
}

// clusterEvict applies the eviction check's runaway pod through the API
// and waits until nodeguard evicts it: Failed, reason Evicted, with the
// kubelet's message and the DisruptionTarget condition, and no OOM kill in
// kubepods.slice or the kernel log.
func (n *node) clusterEvict(t *testing.T) {
	before, err := kubepodsEvents()
	if err != nil {
		t.Fatal(err)
	}
	mark := fmt.Sprintf("node-mode eviction check %d", time.Now().UnixNano())
	if err := kmsgMark(mark); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if out, err := kube("apply", "-f", hogPod.File); err != nil {
		t.Fatalf("kubectl apply -f %s: %v %s", hogPod.File, err, out)
	}
	var hog corev1.Pod
	if _, err := waitFor("the hog evicted, as the API sees it", evictBound, func() (bool, string, error) {
		if ev, err := kubepodsEvents(); err == nil && ev["oom_kill"] > before["oom_kill"] {
			return false, "", fmt.Errorf("the kernel OOM killer fired in kubepods.slice first (memory.events %v, was %v)", ev, before)
		}
		if err := kubeJSON(&hog, "get", "pod", "-n", hogPod.Namespace, hogPod.Name); err != nil {
			return false, err.Error(), nil
		}
		return hog.Status.Phase == corev1.PodFailed && hog.Status.Reason == "Evicted",
			fmt.Sprintf("phase %s reason %q", hog.Status.Phase, hog.Status.Reason), nil
	}); err != nil {
		t.Errorf("%v; journal:\n%s", err, journalText("nodeguard", 25))
		return
	}
	took := time.Since(t0)
	if !strings.HasPrefix(hog.Status.Message, "The node was low on resource: memory.") {
		t.Errorf("the evicted pod's message %q, want the kubelet's", hog.Status.Message)
	}
	target := false
	for _, c := range hog.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == "TerminationByKubelet" {
			target = true
		}
	}
	if !target {
		t.Errorf("no DisruptionTarget=True reason TerminationByKubelet in %v", hog.Status.Conditions)
	}
	after, err := kubepodsEvents()
	if err != nil {
		t.Fatal(err)
	}
	if after["oom_kill"] != before["oom_kill"] {
		t.Errorf("kubepods.slice memory.events oom_kill %d, was %d", after["oom_kill"], before["oom_kill"])
	}
	if klog, err := kernelLogSince(mark); err != nil {
		t.Error(err)
	} else if lines := KernelOOMLines(klog); len(lines) > 0 {
		t.Errorf("the kernel log reports an OOM kill: %s", strings.Join(lines, " | "))
	}
	events, _ := kube("get", "events", "-n", hogPod.Namespace, "--field-selector", "involvedObject.name="+hogPod.Name+",reason=Evicted")
	if !strings.Contains(events, "Evicted") {
		t.Errorf("no Evicted event for the hog: %q", events)
	}
	t.Logf("the hog evicted %.1f s after kubectl apply, as the API sees it: %q", took.Seconds(), hog.Status.Message)
	if out, err := kube("delete", "pod", "-n", hogPod.Namespace, hogPod.Name, "--wait=false"); err != nil {
		t.Errorf("kubectl delete pod hog: %v %s", err, out)
	}
}
