//go:build clusterlane

package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeguard/nodeguard/lab/cluster"
	"github.com/nodeguard/nodeguard/lab/crienv"
)

// Node mode across a SIGKILL: the runtime (a containerd of the test's
// own, as a node's containerd is its own service) keeps the containers;
// nodeguard started again re-adopts them, and a watch on the API server
// sees no container restart, no new container ID and no pod that stops
// being Ready, from the kill until well after the restart.
func TestNodeModeReadoptsPodsAfterSIGKILL(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cp, kubectl, _ := startLaneCluster(t, ctx, dir, cluster.Options{})
	defer cp.Stop()
	const node = "ng-readopt"
	kc, _, _ := nodeCredentials(t, cp, dir, node)

	env := crienv.New(t)
	a := newAgent(t, env, "")
	// The endpoint's serving certificate through a CSR (serverTLSBootstrap),
	// approved here as a cluster admin would: the API server verifies it
	// (--kubelet-certificate-authority) before kubectl exec gets through.
	a.appendConfig(fmt.Sprintf("kubeconfig: %q\nnodeName: %s\nnodeIP: 127.0.0.1\naddress: 127.0.0.1\nport: %d\nserverTLSBootstrap: true\nauthentication: {x509: {clientCAFile: %q}}\n",
		kc, node, freeTCPPort(t), cp.CACert))
	a.start()
	waitUntil(t, ctx, 90*time.Second, "node "+node+" Ready", func() error {
		out, err := cp.Kubectl(ctx, "get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		if s := strings.TrimSpace(string(out)); err != nil || s != "True" {
			return fmt.Errorf("Ready %q, %v", s, err)
		}
		return nil
	})

	deploy := filepath.Join(dir, "deploy.yaml")
	if err := os.WriteFile(deploy, []byte(`apiVersion: apps/v1
kind: Deployment
metadata: {name: steady, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: steady}}
  template:
    metadata: {labels: {app: steady}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: c
        image: `+env.BusyboxImage()+`
        imagePullPolicy: Never
        command: [sleep, "3600"]
        readinessProbe: {exec: {command: ["true"]}, periodSeconds: 2}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl("apply", "-f", deploy)
	rc, err := clientcmd.BuildConfigFromFlags("", cp.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	// ids are the container IDs of the 3 pods once all are Running and Ready.
	ids := map[string]string{}
	waitUntil(t, ctx, 90*time.Second, "3 steady pods Running and Ready", func() error {
		l, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=steady"})
		if err != nil {
			return err
		}
		clear(ids)
		for _, p := range l.Items {
			if p.Status.Phase == corev1.PodRunning && podReady(&p) && len(p.Status.ContainerStatuses) == 1 {
				ids[p.Name] = p.Status.ContainerStatuses[0].ContainerID
			}
		}
		if len(ids) != 3 {
			return fmt.Errorf("%d of 3", len(ids))
		}
		return nil
	})

	csr := approveServingCSR(t, ctx, cp, node)
	pod := ""
	for name := range ids {
		pod = name
	}
	waitUntil(t, ctx, 60*time.Second, "kubectl exec through the bootstrapped serving certificate", func() error { return execServed(ctx, cp, pod) })
	t.Logf("serving certificate issued through CSR %s; kubectl exec works", csr)

	// From here every change the API sees is checked.
	l, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=steady"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{LabelSelector: "app=steady", ResourceVersion: l.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var mu sync.Mutex
	var seen []string
	events, deleted := 0, 0
	stopChecking := false
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			mu.Lock()
			if ev.Type == "DELETED" {
				deleted++
			}
			if stopChecking {
				mu.Unlock()
				continue
			}
			events++
			switch {
			case ev.Type != "MODIFIED":
				seen = append(seen, fmt.Sprintf("%s %s", ev.Type, p.Name))
			case !podReady(p) || p.Status.Phase != corev1.PodRunning:
				seen = append(seen, fmt.Sprintf("%s %s Ready=%v", p.Name, p.Status.Phase, podReady(p)))
			}
			for _, c := range p.Status.ContainerStatuses {
				if c.RestartCount != 0 || c.ContainerID != ids[p.Name] || c.State.Running == nil {
					seen = append(seen, fmt.Sprintf("%s: container %s restarts %d id %s running %v", p.Name, c.Name, c.RestartCount, c.ContainerID, c.State.Running != nil))
				}
			}
			mu.Unlock()
		}
	}()

	killed := time.Now()
	a.kill()
	time.Sleep(3 * time.Second) // the API's pods stay as they were
	a.start()
	t.Logf("nodeguard SIGKILLed and started again; API up %.1f s after the kill", time.Since(killed).Seconds())
	// Re-adopted: the local API has the 3 pods running, with the same
	// containers, and the node is Ready throughout.
	waitUntil(t, ctx, 60*time.Second, "the 3 pods re-adopted", func() error {
		l, err := a.client.List(ctx)
		if err != nil {
			return err
		}
		n := 0
		for _, p := range l.Items {
			if p.Status.Phase == corev1.PodRunning && podReady(&p) && len(p.Status.ContainerStatuses) == 1 &&
				p.Status.ContainerStatuses[0].ContainerID == ids[p.Name] && p.Status.ContainerStatuses[0].RestartCount == 0 {
				n++
			}
		}
		if n != 3 {
			return fmt.Errorf("%d of 3 running with their old containers", n)
		}
		return nil
	})
	t.Logf("re-adopted %.1f s after the kill", time.Since(killed).Seconds())
	// The issued certificate was kept: the restarted endpoint serves with
	// it at once, with no new CSR.
	waitUntil(t, ctx, 30*time.Second, "kubectl exec after the restart", func() error { return execServed(ctx, cp, pod) })
	if out, _ := cp.Kubectl(ctx, "get", "csr", "-o", "name"); strings.Count(string(out), "certificatesigningrequest") != 1 {
		t.Errorf("CSRs after the restart, want the one approved: %s", out)
	}
	// Long enough for the probes, the status writer and a relist or two.
	time.Sleep(15 * time.Second)
	if s := kubectl("get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`); s != "True" {
		t.Errorf("node Ready %q after the restart", s)
	}
	mu.Lock()
	stopChecking = true
	t.Logf("%d pod changes watched from the kill until 15 s after the re-adoption", events)
	for _, s := range seen {
		t.Errorf("the API saw: %s", s)
	}
	mu.Unlock()
	l, err = cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=steady"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range l.Items {
		if c := p.Status.ContainerStatuses; len(c) != 1 || c[0].ContainerID != ids[p.Name] || c[0].RestartCount != 0 {
			t.Errorf("pod %s after the restart: %+v, want its container %s never restarted", p.Name, c, ids[p.Name])
		}
	}

	// The Deployment removed; its pods stop and leave the API.
	kubectl("delete", "deployment", "steady", "--wait=false")
	waitUntil(t, ctx, 90*time.Second, "the steady pods gone", func() error {
		l, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=steady"})
		if err != nil {
			return err
		}
		if len(l.Items) != 0 {
			return fmt.Errorf("%d left", len(l.Items))
		}
		return nil
	})
	// The watch was live throughout: it saw the pods go.
	waitUntil(t, ctx, 30*time.Second, "the watch seeing the 3 deletions", func() error {
		mu.Lock()
		defer mu.Unlock()
		if deleted < 3 {
			return fmt.Errorf("%d DELETED", deleted)
		}
		return nil
	})
}

// execServed runs `kubectl exec pod -- echo served` through the API
// server and the node's endpoint.
func execServed(ctx context.Context, cp *cluster.ControlPlane, pod string) error {
	out, err := cp.Kubectl(ctx, "exec", pod, "--", "echo", "served")
	if err != nil || !strings.Contains(string(out), "served") {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

// approveServingCSR waits for node's kubernetes.io/kubelet-serving CSR
// (the node's own, by its username), approves it as a cluster admin would
// and waits until the signer issued it; it returns its name. What the
// request asks for (subject, SANs, usages) is kubenode's
// TestServerBootstrapsItsServingCertificate's.
func approveServingCSR(t *testing.T, ctx context.Context, cp *cluster.ControlPlane, node string) string {
	t.Helper()
	var name string
	waitUntil(t, ctx, 60*time.Second, "the node's serving CSR", func() error {
		out, err := cp.Kubectl(ctx, "get", "csr", "-o",
			`jsonpath={range .items[?(@.spec.signerName=="kubernetes.io/kubelet-serving")]}{.metadata.name} {.spec.username}{"\n"}{end}`)
		if err != nil {
			return err
		}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[1] == "system:node:"+node {
				name = f[0]
				return nil
			}
		}
		return fmt.Errorf("none yet: %q", out)
	})
	if out, err := cp.Kubectl(ctx, "certificate", "approve", name); err != nil {
		t.Fatalf("kubectl certificate approve %s: %v %s", name, err, out)
	}
	waitUntil(t, ctx, 60*time.Second, "CSR "+name+" issued", func() error {
		out, err := cp.Kubectl(ctx, "get", "csr", name, "-o", "jsonpath={.status.certificate}")
		if err != nil || len(out) == 0 {
			return fmt.Errorf("not yet: %v", err)
		}
		return nil
	})
	return name
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
