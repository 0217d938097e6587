//go:build nodelane

package nodelane

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/deploy/kubernetes"
	"github.com/nodeguard/nodeguard/lab/images"
	"github.com/nodeguard/nodeguard/lab/nodevm"
)

// Guard mode beside the real kubelet (issue 16), on the kubelet check's
// node while its three pods run.
const (
	// guardNamespace is deploy/kubernetes' namespace; guardSA its
	// ServiceAccount.
	guardNamespace = "nodeguard-system"
	guardSA        = "nodeguard-guard"
	// guardBound bounds the DaemonSet's pod Running, its image imported
	// beforehand (under TCG a privileged pod's start takes 20-40 s).
	guardBound = 150 * time.Second
	// guardHogBound bounds the hog's kill and its replacement Running.
	guardHogBound = 180 * time.Second
	// guardHostsLine makes the API server's name resolve in the guest:
	// the DaemonSet's pod (hostNetwork) dials it at kubernetes:443, the
	// name its serving certificate has; qemu forwards 10.0.2.100:443.
	guardHostsLine = "10.0.2.100 kubernetes # nodelane guard check"
	// guardHogMarks is the hog's marker directory (a hostPath): its first
	// container grows without bound, its replacement sleeps.
	guardHogMarks = "/run/nodelane-guard-hog"
	guardMetrics  = "127.0.0.1:9847"
)

// guardPod is a line of `nodeguard guard pods -o json`.
type guardPod struct {
	Namespace     string `json:"namespace"`
	Name          string `json:"name"`
	UID           string `json:"uid"`
	QOS           string `json:"qos"`
	Priority      int32  `json:"priority"`
	Critical      bool   `json:"critical"`
	MemoryRequest int64  `json:"memoryRequest"`
	Source        string `json:"source"`
	Cgroup        string `json:"cgroup"`
}

func guardPods(args ...string) (map[string]guardPod, error) {
	out, err := stdout(cmdTimeout, "/usr/local/bin/nodeguard", append([]string{"guard", "pods", "-o", "json"}, args...)...)
	if err != nil {
		return nil, err
	}
	var l []guardPod
	if err := json.Unmarshal(out, &l); err != nil {
		return nil, fmt.Errorf("nodeguard guard pods -o json: %w: %q", err, out)
	}
	by := map[string]guardPod{}
	for _, p := range l {
		by[p.Namespace+"/"+p.Name] = p
	}
	return by, nil
}

// guardBeside checks guard mode beside the kubelet: what it finds with
// and without the API server, the DaemonSet of deploy/kubernetes applied
// as shipped, and a hog it kills before the kubelet and the kernel OOM
// killer, its Deployment's replacement running after.
func (n *node) guardBeside(t *testing.T, k *kubeletNode, qos map[corev1.PodQOSClass]*corev1.Pod) {
	want := map[string]struct {
		qos     corev1.PodQOSClass
		request int64
	}{}
	for q, p := range qos {
		var req int64
		for _, c := range p.Spec.Containers {
			req += c.Resources.Requests.Memory().Value()
		}
		want[p.Namespace+"/"+p.Name] = struct {
			qos     corev1.PodQOSClass
			request int64
		}{q, req}
	}
	t.Run("guard pods without an API server: the kubelet's pods and their QoS from the runtime and the cgroups", func(t *testing.T) {
		got, err := guardPods()
		if err != nil {
			t.Fatal(err)
		}
		var desc []string
		for name, w := range want {
			p, ok := got[name]
			if !ok {
				t.Errorf("%s not found; found %v", name, got)
				continue
			}
			// Without the API server only a Guaranteed pod's request is
			// known: its limit.
			req := int64(0)
			if w.qos == corev1.PodQOSGuaranteed {
				req = w.request
			}
			if p.QOS != string(w.qos) || p.MemoryRequest != req || p.Source != "node" || p.Priority != 0 {
				t.Errorf("%s: %+v, want QoS %s, memory request %d, from the node", name, p, w.qos, req)
			}
			desc = append(desc, fmt.Sprintf("%s %s request %d", name, p.QOS, p.MemoryRequest))
		}
		if len(got) != len(want) {
			t.Errorf("found %d pods, want the kubelet's %d: %v", len(got), len(want), got)
		}
		t.Logf("without an API server: %s", strings.Join(desc, "; "))
	})

	dir := deployGuard(t, k)
	t.Run("guard pods as the DaemonSet's ServiceAccount: priorities and requests from the API server", func(t *testing.T) {
		kc := guardKubeconfig(t, dir)
		got, err := guardPods("--kubeconfig", kc, "--node-name", k.Name)
		if err != nil {
			t.Fatal(err)
		}
		var desc []string
		for name, w := range want {
			p, ok := got[name]
			if !ok {
				t.Errorf("%s not found; found %v", name, got)
				continue
			}
			if p.QOS != string(w.qos) || p.MemoryRequest != w.request || p.Source != "api" {
				t.Errorf("%s: %+v, want QoS %s, memory request %d, from the API server", name, p, w.qos, w.request)
			}
			desc = append(desc, fmt.Sprintf("%s %s request %d", name, p.QOS, p.MemoryRequest))
		}
		for name, p := range got {
			if strings.HasPrefix(name, guardNamespace+"/") {
				// The guard's own pod: system-node-critical, never
				// evicted.
				if p.Priority != 2000001000 || !p.Critical {
					t.Errorf("the guard's own pod %s: priority %d critical %v, want system-node-critical's 2000001000, critical", name, p.Priority, p.Critical)
				}
				desc = append(desc, fmt.Sprintf("%s priority %d critical", name, p.Priority))
			}
		}
		t.Logf("as %s/%s (a token of its ClusterRole): %s", guardNamespace, guardSA, strings.Join(desc, "; "))
	})

	var guardPodName string
	t.Run("kubectl apply -f deploy/kubernetes/ runs nodeguard guard on the node, with the API server", func(t *testing.T) {
		t0 := time.Now()
		var pod corev1.Pod
		if _, err := waitFor("the DaemonSet's pod Running", guardBound, func() (bool, string, error) {
			var l corev1.PodList
			if err := kubeJSON(&l, "get", "pods", "-n", guardNamespace, "-l", "app.kubernetes.io/name=nodeguard-guard"); err != nil {
				return false, err.Error(), nil
			}
			if len(l.Items) != 1 {
				return false, fmt.Sprintf("%d pods", len(l.Items)), nil
			}
			pod = l.Items[0]
			return pod.Status.Phase == corev1.PodRunning, describePods(&l), nil
		}); err != nil {
			t.Fatalf("%v; kubelet journal:\n%s", err, journalText(kubeletUnit, 20))
		}
		guardPodName = pod.Name
		var logs string
		if _, err := waitFor("nodeguard guard running, the node's pods listed", 60*time.Second, func() (bool, string, error) {
			var err error
			logs, err = kube("logs", "-n", guardNamespace, pod.Name)
			return err == nil && strings.Contains(logs, "nodeguard guard running") && strings.Contains(logs, "pods of the node are listed"), tail(logs, 5), nil
		}); err != nil {
			t.Fatal(err)
		}
		for _, w := range []string{`"api_server":true`, `"cgroup_driver":"systemd"`, `"kubepods":"/kubepods.slice"`} {
			if !strings.Contains(logs, w) {
				t.Errorf("the guard's log has no %s:\n%s", w, tail(logs, 15))
			}
		}
		m, err := guardMetric("nodeguard_guard_pods")
		if err != nil {
			t.Error(err)
		}
		t.Logf("DaemonSet pod %s Running %.1f s after kubectl apply (image %s imported first), guarding %s pods (nodeguard_guard_pods), on the API server; its log: %s",
			pod.Name, time.Since(t0).Seconds(), images.NodeguardName, m, firstLine(grepLine(logs, "nodeguard guard running")))
	})

	t.Run("a hog Deployment's pod is killed by the guard before the kubelet and the kernel OOM killer, and its replacement runs", func(t *testing.T) {
		if guardPodName == "" {
			t.Skip("no guard running: see the DaemonSet's check")
		}
		n.guardHog(t, k, guardPodName, want)
	})
}

// deployGuard imports the nodeguard image (built here from the installed
// binary, static) and applies deploy/kubernetes as shipped, but for the
// API server's address: the test cluster has no kube-proxy, so the
// DaemonSet's pod reaches the API server at kubernetes:443 (the guest's
// /etc/hosts names qemu's forward). It returns the manifests' directory;
// at cleanup everything is deleted and the pod waited for.
func deployGuard(t *testing.T, k *kubeletNode) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "guard-deploy-")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	im, err := images.BuildNodeguard("/usr/local/bin/nodeguard", filepath.Join(dir, "nodeguard.tar"), images.NodeguardName)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := run(2*time.Minute, "ctr", "-n", "k8s.io", "images", "import", im.Archive); err != nil {
		t.Fatalf("ctr images import %s: %v %s", im.Archive, err, out)
	}
	os.Remove(im.Archive)
	imported := time.Since(t0)
	hosts, err := os.ReadFile("/etc/hosts")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("/etc/hosts", append(hosts, []byte(guardHostsLine+"\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	manifests := filepath.Join(dir, "kubernetes")
	if err := os.Mkdir(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	err = fs.WalkDir(kubernetes.Manifests, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := kubernetes.Manifests.ReadFile(p)
		if err != nil {
			return err
		}
		s := string(b)
		if p == "30-daemonset.yaml" {
			const env = "        env:\n"
			if !strings.Contains(s, env) {
				return fmt.Errorf("%s: no %q to add the API server's address to", p, env)
			}
			s = strings.Replace(s, env, env+"        - {name: KUBERNETES_SERVICE_HOST, value: kubernetes}\n        - {name: KUBERNETES_SERVICE_PORT, value: \"443\"}\n", 1)
		}
		return os.WriteFile(filepath.Join(manifests, p), []byte(s), 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		t0 := time.Now()
		if out, err := kube("delete", "-f", manifests, "--wait=true", "--timeout=120s"); err != nil {
			t.Errorf("kubectl delete -f deploy/kubernetes/: %v %s", err, out)
		}
		if err := os.WriteFile("/etc/hosts", hosts, 0o644); err != nil {
			t.Error(err)
		}
		run(time.Minute, "ctr", "-n", "k8s.io", "images", "rm", images.NodeguardName)
		os.RemoveAll(dir)
		t.Logf("guard mode's manifests deleted, its pod gone, %.1f s", time.Since(t0).Seconds())
	})
	k.Apply(t, manifests)
	t.Logf("image %s (%d MiB) built from /usr/local/bin/nodeguard and imported in %.1f s; kubectl apply -f deploy/kubernetes/ (the API server's address added)",
		images.NodeguardName, im.Size>>20, imported.Seconds())
	return dir
}

// guardKubeconfig writes a kubeconfig with a token of the guard's
// ServiceAccount: what the DaemonSet's pod has, for nodeguard guard pods.
func guardKubeconfig(t *testing.T, dir string) string {
	t.Helper()
	token, err := kube("create", "token", guardSA, "-n", guardNamespace, "--duration=1h")
	if err != nil {
		t.Fatalf("kubectl create token: %v %s", err, token)
	}
	ca, err := os.ReadFile(filepath.Join(nodevm.ClusterDir, nodevm.ClusterCA))
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, ca, 0o644); err != nil {
		t.Fatal(err)
	}
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: lane
  cluster: {server: "https://%s", certificate-authority: %q, tls-server-name: kubernetes}
users:
- name: guard
  user: {token: %q}
contexts:
- name: guard
  context: {cluster: lane, user: guard}
current-context: guard
`, nodevm.ClusterAPIAddress, caFile, strings.TrimSpace(token))
	p := filepath.Join(dir, "guard.kubeconfig")
	if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// guardHog applies a Deployment whose first pod grows without bound
// (tail /dev/zero) and checks that the guard, not the kubelet nor the
// kernel, ends it: its pod cgroup killed, the pod removed through the API
// with the Evicted status, the Deployment's replacement Running, the
// kubelet's pods untouched, no OOM kill in kubepods.slice or the kernel
// log.
func (n *node) guardHog(t *testing.T, k *kubeletNode, guardPod string, others map[string]struct {
	qos     corev1.PodQOSClass
	request int64
}) {
	if err := os.MkdirAll(guardHogMarks, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(guardHogMarks) })
	before, err := kubepodsEvents()
	if err != nil {
		t.Fatal(err)
	}
	mark := fmt.Sprintf("guard hog check %d", time.Now().UnixNano())
	if err := kmsgMark(mark); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	k.ApplyYAML(t, fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: guard-hog, namespace: %[1]s}
spec:
  replicas: 1
  selector: {matchLabels: {app: guard-hog}}
  template:
    metadata: {labels: {app: guard-hog}}
    spec:
      terminationGracePeriodSeconds: 2
      automountServiceAccountToken: false
      enableServiceLinks: false
      volumes: [{name: m, hostPath: {path: %[2]s, type: Directory}}]
      containers:
      - name: hog
        image: registry.local/nodeguard/busybox:1.35
        imagePullPolicy: Never
        command: [sh, -c, "if [ -e /m/hogged ]; then echo replacement running; trap 'exit 0' TERM; sleep 3600 & wait; fi; touch /m/hogged; echo hog growing; sleep 2; exec tail /dev/zero"]
        volumeMounts: [{name: m, mountPath: /m}]
        resources: {requests: {memory: 16Mi}}
`, kubeletQoSPods.Namespace, guardHogMarks))
	t.Cleanup(func() {
		if out, err := kube("delete", "deployment", "-n", kubeletQoSPods.Namespace, "guard-hog", "--wait=true", "--timeout=90s"); err != nil {
			t.Errorf("kubectl delete deployment guard-hog: %v %s", err, out)
		}
	})
	var first, replacement corev1.Pod
	if _, err := waitFor("the hog killed and removed, its replacement Running", guardHogBound, func() (bool, string, error) {
		if ev, err := kubepodsEvents(); err == nil && ev["oom_kill"] > before["oom_kill"] {
			return false, "", fmt.Errorf("the kernel OOM killer fired in kubepods.slice (memory.events %v, was %v)", ev, before)
		}
		var l corev1.PodList
		if err := kubeJSON(&l, "get", "pods", "-n", kubeletQoSPods.Namespace, "-l", "app=guard-hog"); err != nil {
			return false, err.Error(), nil
		}
		for _, p := range l.Items {
			switch {
			case first.UID == "":
				first = p
			case p.UID != first.UID && p.Status.Phase == corev1.PodRunning:
				replacement = p
			}
		}
		firstGone := true
		for _, p := range l.Items {
			if p.UID == first.UID {
				firstGone = false
			}
		}
		return first.UID != "" && firstGone && replacement.UID != "", describePods(&l), nil
	}); err != nil {
		logs, _ := kube("logs", "-n", guardNamespace, guardPod, "--tail=30")
		t.Fatalf("%v; %s; the guard's log:\n%s\nthe kubelet's journal:\n%s", err, memoryState(), logs, journalText(kubeletUnit, 20))
	}
	took := time.Since(t0)
	logs, err := kube("logs", "-n", guardNamespace, guardPod)
	if err != nil {
		t.Fatal(err)
	}
	// A hard threshold kills the pod cgroup and deletes the pod; the
	// thrash rule (memory.full, soft) asks the Eviction API.
	decision := grepLine(logs, `"evict pod"`)
	hard := strings.Contains(logs, "guard: pod cgroup killed")
	soft := strings.Contains(logs, "guard: pod evicted through the Eviction API")
	switch {
	case !strings.Contains(decision, first.Name) || !(hard || soft):
		t.Errorf("no decision on %s carried out in the guard's log:\n%s", first.Name, tail(logs, 20))
	case hard && !strings.Contains(logs, "evicted pod removed through the API server"):
		t.Errorf("the guard's log does not say the killed pod was removed through the API server:\n%s", tail(logs, 20))
	}
	// Whose Evicted events: the guard's alone, the kubelet's none.
	var evs corev1.EventList
	if err := kubeJSON(&evs, "get", "events", "-n", kubeletQoSPods.Namespace, "--field-selector", "reason=Evicted"); err != nil {
		t.Fatal(err)
	}
	guardEvents := 0
	for _, e := range evs.Items {
		switch {
		case !strings.HasPrefix(e.InvolvedObject.Name, "guard-hog-"):
			// Another check's pod (node mode's hog, evicted by
			// nodeguard as the kubelet it then was).
		case e.Source.Component == "kubelet" || e.ReportingController == "kubelet":
			t.Errorf("the kubelet evicted %s: %q", e.InvolvedObject.Name, e.Message)
		case e.InvolvedObject.Name == first.Name:
			guardEvents++
		}
	}
	if guardEvents == 0 {
		t.Errorf("no Evicted event on %s from the guard", first.Name)
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
	var names []string
	for name := range others {
		names = append(names, name)
	}
	k.WaitRunning(t, 30*time.Second, names...) // untouched
	kills, _ := guardMetric("nodeguard_guard_kills_total")
	deletes, _ := guardMetric(`nodeguard_guard_api_removals_total{action="delete"}`)
	evictions, _ := guardMetric(`nodeguard_guard_api_removals_total{action="eviction"}`)
	how := "killed (its pod cgroup) and deleted through the API"
	if !hard {
		how = "evicted through the Eviction API"
	}
	t.Logf("hog %s (uid %.8s) %s by the guard, its replacement %s Running %.1f s after kubectl apply; no kubelet eviction, no OOM kill; nodeguard_guard_kills_total %s, api removals delete %s eviction %s; the decision: %s",
		first.Name, first.UID, how, replacement.Name, took.Seconds(), kills, deletes, evictions, decision)
}

// memoryState is the node's memory as the guard and the kernel see it:
// for a check that waited in vain.
func memoryState() string {
	var b strings.Builder
	if v, err := meminfo("MemAvailable"); err == nil {
		fmt.Fprintf(&b, "MemAvailable %d MiB", v>>20)
	}
	if p, err := os.ReadFile("/proc/pressure/memory"); err == nil {
		fmt.Fprintf(&b, "; /proc/pressure/memory %q", strings.TrimSpace(string(p)))
	}
	for _, sig := range []string{"memory.available", "allocatableMemory.available"} {
		if v, err := guardMetric(`nodeguard_node_signal_available{signal="` + sig + `"}`); err == nil {
			fmt.Fprintf(&b, "; the guard's %s %s", sig, v)
		}
	}
	return b.String()
}

// guardMetric reads one series of the guard's /metrics (the DaemonSet's
// pod is on the node's network, its metrics on the guest's loopback).
func guardMetric(series string) (string, error) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + guardMetrics + "/metrics")
	if err != nil {
		return "", fmt.Errorf("the guard's metrics: %w", err)
	}
	defer resp.Body.Close()
	all, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("the guard's metrics: %w", err)
	}
	for _, l := range strings.Split(string(all), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("the guard's metrics have no %s", series)
}

// grepLine returns the last line of s that contains sub, "" if none.
func grepLine(s, sub string) string {
	lines := strings.Split(s, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], sub) {
			return lines[i]
		}
	}
	return ""
}
