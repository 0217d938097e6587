//go:build clusterlane

package agent

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/lab/cluster"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Node mode against a real control plane (the cached v1.37.2 binaries on
// loopback, Node,RBAC and NodeRestriction on): nodeguard registers its
// Node, which the node controller sees Ready with its capacity, keeps its
// Lease, gives its static pod a mirror pod, runs the pods of Deployments
// the scheduler binds to it and reports their status (50 at once, their
// start latency logged), honours a deletion's grace period while the
// ReplicaSet replaces the pod, rejects a pod that does not fit, evicts a
// runaway pod before the kernel OOM killer as the cluster expects an
// eviction to look (Failed/Evicted, DisruptionTarget, the Event,
// MemoryPressure and its taint, the replacement once it clears), and once
// stopped the node goes NotReady.
func TestNodeModeJoinsARealControlPlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cp, kubectl, jsonpath := startLaneCluster(t, ctx, dir, cluster.Options{NodeMonitorGracePeriod: 20 * time.Second})
	defer cp.Stop()
	const node = "ng-node"
	kc, cert, key := nodeCredentials(t, cp, dir, node)
	// Node allocatable cut to 512 MiB through systemReserved, as in
	// TestRunEvictsAHogBeforeTheKernelOOMKiller, so that a runaway pod
	// meets allocatableMemory.available<100Mi long before the machine
	// feels it; MemoryPressure lasts 10 s after the last crossing.
	mi, err := nodestats.ReadMeminfo(nodestats.MeminfoPath)
	if err != nil {
		t.Fatal(err)
	}
	reserved := int64(mi.MemTotal) - 512<<20
	if reserved <= 0 {
		t.Fatal("the machine has less than 512 MiB")
	}
	// The node's HTTPS endpoint on loopback, on a port of its own, with a
	// serving certificate of the cluster's CA (the API server verifies
	// it) and the cluster's CA for its callers' client certificates.
	port := freeTCPPort(t)
	servingCert, servingKey, err := cp.IssueServingCert(node+"-serving", node, []net.IP{net.IPv4(127, 0, 0, 1)}, node)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`imagePull: false
nodeLabels: {pool: dense}
systemReserved: {memory: "%d"}
eviction:
  evictionHard: {memory.available: 100Mi}
  evictionPressureTransitionPeriod: 10s
volumes: {hostPathAllow: [%q]}
address: 127.0.0.1
port: %d
tlsCertFile: %q
tlsPrivateKeyFile: %q
authentication: {x509: {clientCAFile: %q}}
`, reserved, dir, port, servingCert, servingKey, cp.CACert)), 0o600); err != nil {
		t.Fatal(err)
	}

	// A static pod from the manifest directory, seen by the cluster as
	// its mirror pod.
	manifests := filepath.Join(dir, "manifests")
	if err := os.MkdirAll(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	staticManifest := filepath.Join(manifests, "static-web.yaml")
	if err := os.WriteFile(staticManifest, []byte(`apiVersion: v1
kind: Pod
metadata: {name: static-web, namespace: default, labels: {tier: static}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: registry.local/nodeguard/busybox:1.35
    imagePullPolicy: Never
    command: [sleep, "3600"]
`), 0o600); err != nil {
		t.Fatal(err)
	}

	buildBinary(t) // not part of the registration time
	started := time.Now()
	d := startDaemon(t, dir, cfg, nil, "--kubeconfig", kc, "--node-name", node, "--node-ip", "127.0.0.1", "--register-with-taints", "dedicated=guarded:NoSchedule",
		"--pod-manifest-path", manifests)
	waitJSONPath(t, ctx, 90*time.Second, "node "+node+" Ready", "True", jsonpath, "get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	t.Logf("node registered and Ready %.1f s after nodeguard started", time.Since(started).Seconds())
	t.Logf("kubectl get nodes -o wide:\n%s", kubectl("get", "nodes", "-o", "wide"))
	for path, want := range map[string]string{
		`{.metadata.labels.pool}`:                                  "dense",
		`{.metadata.labels.kubernetes\.io/hostname}`:               node,
		`{.spec.taints[0].key}`:                                    "dedicated",
		`{.status.conditions[?(@.type=="MemoryPressure")].reason}`: "KubeletHasSufficientMemory",
		`{.status.daemonEndpoints.kubeletEndpoint.Port}`:           strconv.Itoa(port),
		`{.status.nodeInfo.containerRuntimeVersion}`:               "containerd://",
		`{.status.allocatable.pods}`:                               "",
	} {
		got := kubectl("get", "node", node, "-o", "jsonpath="+path)
		if !strings.HasPrefix(got, want) || (want == "" && got == "") {
			t.Errorf("node %s = %q, want %q", path, got, want)
		}
	}
	if cap := kubectl("get", "node", node, "-o", "jsonpath={.status.capacity.memory}"); cap == "" {
		t.Error("no memory capacity")
	}
	mirror := "static-web-" + node
	waitJSONPath(t, ctx, 60*time.Second, "the mirror pod "+mirror+" Running", "Running/Node/file/static", jsonpath, "get", "pod", mirror, "-o", `jsonpath={.status.phase}/{.metadata.ownerReferences[0].kind}/{.metadata.annotations.kubernetes\.io/config\.source}/{.metadata.labels.tier}`)
	t.Logf("mirror pod %s Running %.1f s after nodeguard started", mirror, time.Since(started).Seconds())
	holder := kubectl("-n", "kube-node-lease", "get", "lease", node, "-o", "jsonpath={.spec.holderIdentity} {.metadata.ownerReferences[0].kind}")
	if holder != node+" Node" {
		t.Errorf("lease holder and owner %q, want %q", holder, node+" Node")
	}

	// A Deployment of 3 replicas, scheduled here (it tolerates the taint),
	// Running with pod IPs from nodeguard's network.
	deploy := filepath.Join(dir, "deploy.yaml")
	if err := os.WriteFile(deploy, []byte(`apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 20
      tolerations: [{key: dedicated, operator: Equal, value: guarded, effect: NoSchedule}]
      containers:
      - name: web
        image: registry.local/nodeguard/busybox:1.35
        imagePullPolicy: Never
        command: [sh, -c, "trap 'sleep 2; exit 0' TERM; while true; do sleep 1; done"]
        readinessProbe: {exec: {command: ["true"]}, periodSeconds: 2}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	applied := time.Now()
	kubectl("apply", "-f", deploy)
	waitUntil(t, ctx, 120*time.Second, "3 web pods Running and Ready", func() error {
		out, err := jsonpath("get", "pods", "-l", "app=web", "-o",
			`jsonpath={range .items[*]}{.status.phase}/{.status.conditions[?(@.type=="Ready")].status}/{.status.podIP}{"\n"}{end}`)
		if err != nil {
			return err
		}
		n := 0
		for _, l := range strings.Fields(out) {
			if parts := strings.Split(l, "/"); len(parts) == 3 && parts[0] == "Running" && parts[1] == "True" && parts[2] != "" {
				n++
			}
		}
		if n != 3 {
			return fmt.Errorf("%d of 3 Running and Ready: %q", n, out)
		}
		return nil
	})
	t.Logf("3 replicas Running and Ready %.1f s after kubectl apply", time.Since(applied).Seconds())
	t.Logf("kubectl get pods -o wide:\n%s", kubectl("get", "pods", "-o", "wide"))
	if got := kubectl("get", "deployment", "web", "-o", "jsonpath={.status.readyReplicas}"); got != "3" {
		t.Errorf("deployment readyReplicas %q", got)
	}

	// kubectl logs, exec and port-forward, through the API server to the
	// node's endpoint; who else may call it.
	nodeEndpointChecks(t, ctx, cp, kubectl, dir, node, port, cert, key)
	readinessGateCheck(t, ctx, kubectl, jsonpath, dir, node)

	// Start latency: a 50-replica Deployment, each pod from its creation
	// (the watch's ADDED) to Running, as a client of the API sees both.
	startLatency(t, ctx, cp, kubectl, filepath.Join(dir, "scale.yaml"), 50)

	// kubectl delete honours the grace period: the pod is Terminating
	// while its container runs its 2 s TERM trap, then gone from the API;
	// its replacement runs.
	victim := kubectl("get", "pods", "-l", "app=web", "-o", "jsonpath={.items[0].metadata.name}")
	uid := kubectl("get", "pod", victim, "-o", "jsonpath={.metadata.uid}")
	delStart := time.Now()
	kubectl("delete", "pod", victim, "--wait=false")
	waitUntil(t, ctx, 60*time.Second, "pod "+victim+" gone from the API", func() error {
		out, _ := jsonpath("get", "pod", victim, "-o", "jsonpath={.metadata.uid}", "--ignore-not-found")
		if out == uid {
			return fmt.Errorf("still there")
		}
		return nil
	})
	gone := time.Since(delStart)
	t.Logf("deleted pod gone from the API %.1f s after kubectl delete (TERM trap: 2 s)", gone.Seconds())
	if gone < 2*time.Second {
		t.Errorf("pod gone after %v, before its container's 2 s TERM trap ended", gone)
	}
	waitUntil(t, ctx, 90*time.Second, "3 web pods Running again", func() error {
		out, err := jsonpath("get", "pods", "-l", "app=web", "-o", `jsonpath={range .items[*]}{.status.phase}{"\n"}{end}`)
		if err != nil {
			return err
		}
		if n := strings.Count(out, "Running"); n != 3 {
			return fmt.Errorf("%d Running: %q", n, out)
		}
		return nil
	})

	// A pod the node cannot run: rejected with the kubelet's reason, an
	// Event naming it, nothing else disturbed.
	const big = "1Ti" // more than the node's allocatable memory
	if err := os.WriteFile(filepath.Join(dir, "big.yaml"), []byte(`apiVersion: v1
kind: Pod
metadata: {name: too-big, namespace: default}
spec:
  nodeName: `+node+`
  containers:
  - name: c
    image: registry.local/nodeguard/busybox:1.35
    imagePullPolicy: Never
    command: [sleep, "3600"]
    resources: {requests: {memory: "`+big+`"}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl("apply", "-f", filepath.Join(dir, "big.yaml"))
	waitJSONPath(t, ctx, 60*time.Second, "pod too-big rejected", "Failed/OutOfmemory", jsonpath, "get", "pod", "too-big", "-o", "jsonpath={.status.phase}/{.status.reason}")
	t.Logf("rejected: %s", kubectl("get", "pod", "too-big", "-o", "jsonpath={.status.message}"))
	waitUntil(t, ctx, 30*time.Second, "an OutOfmemory event on too-big", func() error {
		out, err := jsonpath("get", "events", "--field-selector", "involvedObject.name=too-big", "-o", "jsonpath={.items[*].reason}")
		if err != nil {
			return err
		}
		if !strings.Contains(out, "OutOfmemory") {
			return fmt.Errorf("events %q", out)
		}
		return nil
	})
	if n := strings.Count(kubectl("get", "pods", "-l", "app=web", "-o", `jsonpath={range .items[*]}{.status.phase}{"\n"}{end}`), "Running"); n != 3 {
		t.Errorf("%d web pods Running after the rejection, want 3", n)
	}

	// A pod whose ConfigMap does not exist yet: held Pending, the reason in
	// a FailedMount Event; started once the ConfigMap is created.
	if err := os.WriteFile(filepath.Join(dir, "needs-config.yaml"), []byte(`apiVersion: v1
kind: Pod
metadata: {name: needs-config, namespace: default}
spec:
  nodeName: `+node+`
  terminationGracePeriodSeconds: 1
  volumes: [{name: cfg, configMap: {name: later}}]
  containers:
  - name: c
    image: registry.local/nodeguard/busybox:1.35
    imagePullPolicy: Never
    command: [sh, -c, "cat /cfg/k; exec sleep 3600"]
    volumeMounts: [{name: cfg, mountPath: /cfg}]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl("apply", "-f", filepath.Join(dir, "needs-config.yaml"))
	waitUntil(t, ctx, 30*time.Second, "a FailedMount event on needs-config", func() error {
		out, err := jsonpath("get", "events", "--field-selector", "involvedObject.name=needs-config,reason=FailedMount", "-o", "jsonpath={.items[*].message}")
		if err != nil {
			return err
		}
		if !strings.Contains(out, "later") {
			return fmt.Errorf("events %q", out)
		}
		t.Logf("held: FailedMount: %s", out)
		return nil
	})
	if got := kubectl("get", "pod", "needs-config", "-o", "jsonpath={.status.phase}"); got != "Pending" {
		t.Errorf("pod with a missing ConfigMap is %q, want Pending", got)
	}
	created := time.Now()
	kubectl("create", "configmap", "later", "--from-literal=k=v")
	waitJSONPath(t, ctx, 60*time.Second, "needs-config Running once its ConfigMap exists", "Running", jsonpath, "get", "pod", "needs-config", "-o", "jsonpath={.status.phase}")
	t.Logf("needs-config Running %.1f s after its ConfigMap was created", time.Since(created).Seconds())
	kubectl("delete", "pod", "needs-config", "--wait=false")

	// A runaway pod of a Deployment: evicted before the kernel OOM killer,
	// Failed/Evicted with the kubelet's message, DisruptionTarget and an
	// Evicted Event; MemoryPressure on the node, and the node controller's
	// taint, while it lasts; the ReplicaSet's replacement runs once it
	// clears. The first pod to run hogs (a marker on a hostPath says so);
	// its replacements sleep.
	runaway := filepath.Join(dir, "runaway.yaml")
	if err := os.WriteFile(runaway, []byte(`apiVersion: apps/v1
kind: Deployment
metadata: {name: runaway, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: runaway}}
  template:
    metadata: {labels: {app: runaway}}
    spec:
      terminationGracePeriodSeconds: 2
      tolerations: [{key: dedicated, operator: Equal, value: guarded, effect: NoSchedule}]
      volumes: [{name: m, hostPath: {path: `+filepath.Join(dir, "marker")+`, type: DirectoryOrCreate}}]
      containers:
      - name: hog
        image: registry.local/nodeguard/busybox:1.35
        imagePullPolicy: Never
        command: [sh, -c, "if [ -e /m/hogged ]; then exec sleep 3600; fi; touch /m/hogged; sleep 2; exec tail /dev/zero"]
        volumeMounts: [{name: m, mountPath: /m}]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl("apply", "-f", runaway)
	var hog, hogUID string
	waitUntil(t, ctx, 90*time.Second, "the runaway pod evicted", func() error {
		out, err := jsonpath("get", "pods", "-l", "app=runaway", "-o",
			`jsonpath={range .items[*]}{.metadata.name}/{.metadata.uid}/{.status.phase}/{.status.reason}{"\n"}{end}`)
		if err != nil {
			return err
		}
		for _, l := range strings.Fields(out) {
			if f := strings.Split(l, "/"); len(f) == 4 && f[2] == "Failed" && f[3] == "Evicted" {
				hog, hogUID = f[0], f[1]
				return nil
			}
		}
		return fmt.Errorf("pods %q", out)
	})
	evictedAt := time.Now()
	msg := kubectl("get", "pod", hog, "-o", "jsonpath={.status.message}")
	t.Logf("evicted %s: %s", hog, msg)
	if !strings.HasPrefix(msg, "The node was low on resource: memory.") {
		t.Errorf("eviction message %q, want the kubelet's", msg)
	}
	if got := kubectl("get", "pod", hog, "-o", `jsonpath={.status.conditions[?(@.type=="DisruptionTarget")].status}/{.status.conditions[?(@.type=="DisruptionTarget")].reason}/{.status.conditions[?(@.type=="Ready")].status}`); got != "True/TerminationByKubelet/False" {
		t.Errorf("evicted pod DisruptionTarget status/reason and Ready %q, want True/TerminationByKubelet/False", got)
	}
	waitUntil(t, ctx, 30*time.Second, "an Evicted event on "+hog, func() error {
		out, err := jsonpath("get", "events", "--field-selector", "involvedObject.uid="+hogUID, "-o", "jsonpath={.items[*].reason}")
		if err != nil {
			return err
		}
		if !strings.Contains(out, "Evicted") {
			return fmt.Errorf("events %q", out)
		}
		return nil
	})
	t.Logf("kubectl describe pod %s (end):\n%s", hog, tail(kubectl("describe", "pod", hog), 12))
	waitJSONPath(t, ctx, 20*time.Second, "MemoryPressure on the node", "True", jsonpath, "get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="MemoryPressure")].status}`)
	pressureSeen := time.Since(evictedAt)
	taints := kubectl("get", "node", node, "-o", "jsonpath={.spec.taints[*].key}")
	t.Logf("MemoryPressure on the node %.1f s after the eviction was seen; taints %s", pressureSeen.Seconds(), taints)
	waitUntil(t, ctx, 90*time.Second, "the replacement Running", func() error {
		out, err := jsonpath("get", "pods", "-l", "app=runaway", "-o", `jsonpath={range .items[*]}{.metadata.uid}/{.status.phase}{"\n"}{end}`)
		if err != nil {
			return err
		}
		for _, l := range strings.Fields(out) {
			if f := strings.Split(l, "/"); len(f) == 2 && f[0] != hogUID && f[1] == "Running" {
				return nil
			}
		}
		return fmt.Errorf("pods %q", out)
	})
	t.Logf("replacement Running %.1f s after the eviction was seen (MemoryPressure's transition period: 10 s)", time.Since(evictedAt).Seconds())
	waitUntil(t, ctx, 60*time.Second, "MemoryPressure cleared", func() error {
		out, err := jsonpath("get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="MemoryPressure")].status}/{.spec.taints[*].key}`)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(out, "False/") || strings.Contains(out, "memory-pressure") {
			return fmt.Errorf("MemoryPressure/taints %q", out)
		}
		return nil
	})
	evs, err := d.client.Events(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var evicted, oomKills int
	for _, e := range evs {
		switch e.Kind {
		case "eviction":
			evicted++
		case "oom_kill":
			oomKills++
			t.Logf("kernel OOM kill: %s", e.Object)
		}
	}
	if evicted != 1 || oomKills != 0 {
		t.Errorf("%d evictions (want 1), %d kernel OOM kills (want 0)", evicted, oomKills)
	}

	// The manifest removed: the static pod stops and its mirror goes.
	if err := os.Remove(staticManifest); err != nil {
		t.Fatal(err)
	}
	waitJSONPath(t, ctx, 60*time.Second, "the mirror pod "+mirror+" gone", "", jsonpath, "get", "pod", mirror, "--ignore-not-found", "-o", "jsonpath={.metadata.name}")

	// Stopped, nodeguard no longer renews its Lease: the node controller
	// marks the node NotReady (grace period 20 s here).
	if err := d.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	waitUntil(t, ctx, 90*time.Second, "node "+node+" NotReady or Unknown", func() error {
		s, err := jsonpath("get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		if err != nil {
			return err
		}
		if s == "True" {
			return fmt.Errorf("Ready=%q", s)
		}
		return nil
	})
	t.Logf("node not Ready %.1f s after nodeguard was stopped: %s", time.Since(stopped).Seconds(),
		kubectl("get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].reason}`))
	if err := cp.Died(); err != nil {
		t.Fatal(err)
	}
}

// startLaneCluster starts the cached control plane (NODEGUARD_CP_BIN) for
// a cluster-lane test, with opts' other fields, under dir/cp; the caller
// stops it. kubectl fails the test on an error; jsonpath returns it.
func startLaneCluster(t *testing.T, ctx context.Context, dir string, opts cluster.Options) (*cluster.ControlPlane, func(...string) string, func(...string) (string, error)) {
	t.Helper()
	cgtest.RequirePrivileged(t)
	opts.Bin = os.Getenv("NODEGUARD_CP_BIN")
	if opts.Bin == "" {
		t.Fatal("NODEGUARD_CP_BIN is not set: the directory scripts/controlplane.sh prints (make test-cluster sets it)")
	}
	opts.Dir, opts.Progress = filepath.Join(dir, "cp"), logWriter{t}
	cp, err := cluster.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := cp.Kubectl(ctx, args...)
		if err != nil {
			t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out))
	}
	jsonpath := func(args ...string) (string, error) {
		out, err := cp.Kubectl(ctx, args...)
		return strings.TrimSpace(string(out)), err
	}
	return cp, kubectl, jsonpath
}

// nodeCredentials issues node's client certificate (system:node:<node>
// in system:nodes, what the Node authorizer knows) and writes its
// kubeconfig in dir.
func nodeCredentials(t *testing.T, cp *cluster.ControlPlane, dir, node string) (kubeconfig, cert, key string) {
	t.Helper()
	cert, key, err := cp.IssueClientCert(node, "system:node:"+node, "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig = filepath.Join(dir, node+".kubeconfig")
	if err := cluster.WriteKubeconfig(kubeconfig, cp.Server, cp.CACert, cluster.KubeconfigAuth{CertFile: cert, KeyFile: key}); err != nil {
		t.Fatal(err)
	}
	return kubeconfig, cert, key
}

// startLatency applies a Deployment of n busybox replicas and logs, per
// pod, the time from its creation to Running as an API watch sees them,
// then deletes it and waits until its pods are gone.
func startLatency(t *testing.T, ctx context.Context, cp *cluster.ControlPlane, kubectl func(...string) string, file string, n int) {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", cp.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{LabelSelector: "app=scale"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := os.WriteFile(file, []byte(fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: scale, namespace: default}
spec:
  replicas: %d
  selector: {matchLabels: {app: scale}}
  template:
    metadata: {labels: {app: scale}}
    spec:
      terminationGracePeriodSeconds: 1
      tolerations: [{key: dedicated, operator: Equal, value: guarded, effect: NoSchedule}]
      containers:
      - {name: c, image: registry.local/nodeguard/busybox:1.35, imagePullPolicy: Never, command: [sleep, "3600"]}
`, n)), 0o600); err != nil {
		t.Fatal(err)
	}
	applied := time.Now()
	kubectl("apply", "-f", file)
	added := map[types.UID]time.Time{}
	var lat []time.Duration
	timeout := time.After(4 * time.Minute)
	for len(lat) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch ended after %d of %d pods ran", len(lat), n)
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			now := time.Now()
			at, seen := added[p.UID]
			if !seen {
				added[p.UID], at = now, now
			}
			if p.Status.Phase == corev1.PodRunning && !at.IsZero() {
				lat = append(lat, now.Sub(at))
				added[p.UID] = time.Time{} // counted
			}
		case <-timeout:
			t.Fatalf("%d of %d pods Running after 4 min", len(lat), n)
		}
	}
	all := time.Since(applied)
	slices.Sort(lat)
	q := func(f float64) time.Duration { return lat[min(len(lat)-1, int(f*float64(len(lat))))] }
	t.Logf("start latency of %d pods, creation to Running: p50 %.2f s, p99 %.2f s, max %.2f s; all Running %.1f s after kubectl apply",
		n, q(0.50).Seconds(), q(0.99).Seconds(), lat[len(lat)-1].Seconds(), all.Seconds())
	kubectl("delete", "deployment", "scale", "--cascade=foreground", "--timeout=3m")
	waitUntil(t, ctx, 3*time.Minute, "the scale pods gone", func() error {
		out := kubectl("get", "pods", "-l", "app=scale", "-o", "name")
		if out != "" {
			return fmt.Errorf("%d left", len(strings.Fields(out)))
		}
		return nil
	})
}

// waitJSONPath waits until jsonpath(args...) gives want.
func waitJSONPath(t *testing.T, ctx context.Context, d time.Duration, what, want string, jsonpath func(...string) (string, error), args ...string) {
	t.Helper()
	waitUntil(t, ctx, d, what, func() error {
		out, err := jsonpath(args...)
		if err != nil {
			return err
		}
		if out != want {
			return fmt.Errorf("got %q, want %q", out, want)
		}
		return nil
	})
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	l := strings.Split(s, "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

func waitUntil(t *testing.T, ctx context.Context, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
	t.Fatalf("no %s after %v: %v", what, d, err)
}
