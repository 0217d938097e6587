//go:build clusterlane

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/internal/cluster"
)

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Node mode against a real control plane (the cached v1.37.2 binaries on
// loopback, Node,RBAC and NodeRestriction on): nodeguard registers its
// Node, which the node controller sees Ready with its capacity, keeps its
// Lease, runs the pods of a Deployment the scheduler binds to it and
// reports their status, honours a deletion's grace period while the
// ReplicaSet replaces the pod, and once stopped the node goes NotReady.
func TestNodeModeJoinsARealControlPlane(t *testing.T) {
	cgtest.RequirePrivileged(t)
	bin := os.Getenv("NODEGUARD_CP_BIN")
	if bin == "" {
		t.Fatal("NODEGUARD_CP_BIN is not set: the directory scripts/controlplane.sh prints (make test-cluster sets it)")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cp, err := cluster.Start(ctx, cluster.Options{Bin: bin, Dir: filepath.Join(dir, "cp"), Progress: logWriter{t},
		NodeMonitorGracePeriod: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
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
	const node = "ng-node"
	cert, key, err := cp.IssueClientCert(node, "system:node:"+node, "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(dir, node+".kubeconfig")
	if err := cluster.WriteKubeconfig(kc, cp.Server, cp.CACert, cluster.KubeconfigAuth{CertFile: cert, KeyFile: key}); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte("nodeLabels: {pool: dense}\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	buildBinary(t) // not part of the registration time
	started := time.Now()
	d := startDaemon(t, dir, cfg, nil, "--kubeconfig", kc, "--node-name", node, "--register-with-taints", "dedicated=guarded:NoSchedule")
	waitUntil(t, ctx, 90*time.Second, "node "+node+" Ready", func() error {
		s, err := jsonpath("get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		if err != nil {
			return err
		}
		if s != "True" {
			return fmt.Errorf("Ready=%q", s)
		}
		return nil
	})
	t.Logf("node registered and Ready %.1f s after nodeguard started", time.Since(started).Seconds())
	t.Logf("kubectl get nodes -o wide:\n%s", kubectl("get", "nodes", "-o", "wide"))
	for path, want := range map[string]string{
		`{.metadata.labels.pool}`:                                  "dense",
		`{.metadata.labels.kubernetes\.io/hostname}`:               node,
		`{.spec.taints[0].key}`:                                    "dedicated",
		`{.status.conditions[?(@.type=="MemoryPressure")].reason}`: "KubeletHasSufficientMemory",
		`{.status.daemonEndpoints.kubeletEndpoint.Port}`:           "10250",
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
	waitUntil(t, ctx, 60*time.Second, "pod too-big rejected", func() error {
		out, err := jsonpath("get", "pod", "too-big", "-o", "jsonpath={.status.phase}/{.status.reason}")
		if err != nil {
			return err
		}
		if out != "Failed/OutOfmemory" {
			return fmt.Errorf("phase/reason %q", out)
		}
		return nil
	})
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
