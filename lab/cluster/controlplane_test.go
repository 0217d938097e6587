//go:build clusterlane

package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// The control plane the cluster lane runs nodeguard against comes up on
// loopback from the cached binaries, its controller manager and scheduler
// work, a node's client certificate authenticates as that node, the Node
// authorizer and NodeRestriction keep it to its own Node, and Stop ends
// every process it started.
func TestControlPlane(t *testing.T) {
	bin := os.Getenv("NODEGUARD_CP_BIN")
	if bin == "" {
		t.Fatal("NODEGUARD_CP_BIN is not set: the directory scripts/controlplane.sh prints (make test-cluster sets it)")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	cp, err := Start(ctx, Options{Bin: bin, Dir: t.TempDir(), Progress: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			cp.Stop()
		}
	}()
	t.Logf("control plane up in %.1f s: %s, pids %v", time.Since(start).Seconds(), cp.Server, cp.Pids())

	if out, err := cp.Kubectl(ctx, "get", "--raw", "/readyz"); err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("kubectl get --raw /readyz: %q, %v", out, err)
	}
	if _, err := cp.Kubectl(ctx, "create", "namespace", "lane"); err != nil {
		t.Fatal(err)
	}
	// The controller manager's service account and root CA publishers
	// fill a new namespace.
	waitFor(t, ctx, 90*time.Second, "the default ServiceAccount and kube-root-ca.crt in namespace lane", func() error {
		if _, err := cp.Kubectl(ctx, "-n", "lane", "get", "serviceaccount", "default"); err != nil {
			return err
		}
		_, err := cp.Kubectl(ctx, "-n", "lane", "get", "configmap", "kube-root-ca.crt")
		return err
	})

	cert, key, err := cp.IssueClientCert("node-a", "system:node:node-a", "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	kc := cp.opts.Dir + "/node-a.kubeconfig"
	if err := WriteKubeconfig(kc, cp.Server, cp.CACert, KubeconfigAuth{CertFile: cert, KeyFile: key}); err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	node := kubernetes.NewForConfigOrDie(rc)
	if _, err := node.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("node-a creating its own Node: %v", err)
	}
	_, err = node.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("node-a creating node-b's Node: %v, want forbidden (NodeRestriction)", err)
	}
	if _, err := node.CoreV1().Secrets("lane").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node-a listing secrets: %v, want forbidden (Node authorizer)", err)
	}
	// The scheduler runs and is authorized: it finds no node for a pod
	// (node-a has no Ready condition and carries the not-ready taint) and
	// says so in the pod's status.
	if _, err := cp.Kubectl(ctx, "-n", "lane", "run", "waiter", "--image", "busybox", "--restart", "Never"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, 60*time.Second, "the scheduler's PodScheduled=False on pod lane/waiter", func() error {
		out, err := cp.Kubectl(ctx, "-n", "lane", "get", "pod", "waiter", "-o", `jsonpath={.status.conditions[?(@.type=="PodScheduled")].reason}`)
		if err != nil {
			return err
		}
		if r := strings.TrimSpace(string(out)); r != "Unschedulable" {
			return fmt.Errorf("PodScheduled reason %q", r)
		}
		return nil
	})
	if err := cp.Died(); err != nil {
		t.Fatal(err)
	}

	if err := cp.Stop(); err != nil {
		t.Error(err)
	}
	stopped = true
	// Stop reaped every process it started; nothing answers on the API
	// server's port any more.
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(cp.Server, "https://"), time.Second); err == nil {
		c.Close()
		t.Errorf("something still accepts on %s after Stop", cp.Server)
	}
}

func waitFor(t *testing.T, ctx context.Context, d time.Duration, what string, f func() error) {
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
