package lifecycle_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/netplumb"
)

const netPods = `
apiVersion: v1
kind: Pod
metadata:
  name: server
  annotations: {kubernetes.io/ingress-bandwidth: 10M, kubernetes.io/egress-bandwidth: 20M}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: httpd
    image: BUSYBOX
    command: [sh, -c, "mkdir -p /www && echo served-by-server > /www/index.html && exec httpd -f -p 8080 -h /www"]
    ports: [{containerPort: 8080, hostPort: 18080}]
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: c, image: BUSYBOX, command: [sleep, "3600"]}
`

func TestPodNetworkThroughCNI(t *testing.T) {
	r := newRig(t)
	m, _ := r.manager(t)
	ctx := context.Background()
	if _, err := m.Apply(ctx, r.pods(t, netPods), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	server := waitPod(t, m, "server", "ran", running)
	client := waitPod(t, m, "client", "ran", running)
	t.Logf("server %s, client %s", server.Status.PodIP, client.Status.PodIP)

	// Pod to pod over the bridge, from inside the client pod.
	// (busybox nc, not wget: the static busybox's wget resolves through
	// glibc's NSS, which a static binary cannot load.)
	out, errOut, code := r.exec(t, m, "client", "c", "sh", "-c",
		"printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | timeout 5 nc "+server.Status.PodIP+" 8080")
	if code != 0 || !strings.HasSuffix(out, "served-by-server\n") {
		t.Errorf("client -> server: %q (stderr %q, exit %d)", out, errOut, code)
	}

	// hostPort through portmap, from the node's network namespace (the
	// runtime's, which this test created): the gateway address is local
	// there, so the OUTPUT chain's DNAT applies.
	nc := r.env.NetworkConfig()
	gw := nc.Subnet.Addr().Next()
	var body string
	err := ns.WithNetNSPath(r.env.NetNS(), func(ns.NetNS) error {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(gw, 18080).String(), 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET /index.html HTTP/1.0\r\n\r\n")
		b, err := io.ReadAll(c)
		body = string(b)
		return err
	})
	if err != nil || !strings.HasSuffix(body, "served-by-server\n") {
		t.Errorf("hostPort 18080 from the node namespace: %v, got %q", err, body)
	}

	// The bandwidth annotations are shaped on the veth (tbf) and its ifb.
	st, err := r.client.PodSandboxStatus(ctx, sandboxOf(t, r, server))
	if err != nil {
		t.Fatal(err)
	}
	p, err := netplumb.Verify(ctx, netplumb.VerifyRequest{NodeNetNS: r.env.NetNS(), PodNetNS: st.NetNS, Bridge: nc.Bridge, IP: netip.MustParseAddr(st.IP)})
	if err != nil {
		t.Fatal(err)
	}
	if p.IngressRate != 10_000_000 || p.EgressRate != 20_000_000 {
		t.Errorf("shaped ingress %d bit/s, egress %d bit/s; want 10M and 20M", p.IngressRate, p.EgressRate)
	}

	for _, n := range []string{"server", "client"} {
		if err := m.Delete(ctx, "default", n); err != nil {
			t.Fatal(err)
		}
		waitGone(t, m, n)
	}
	if left := r.leftovers(t); len(left) > 0 {
		t.Errorf("left after removal: %v", left)
	}
}

func sandboxOf(t *testing.T, r *rig, p *corev1.Pod) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sbs, err := r.client.ListPodSandbox(ctx, map[string]string{"io.kubernetes.pod.uid": string(p.UID)})
	if err != nil || len(sbs) != 1 {
		t.Fatalf("sandboxes of %s: %d, %v", p.Name, len(sbs), err)
	}
	return sbs[0].Id
}

// churnPod is a pod with a network, a disk and a memory emptyDir and a
// configMap: everything that can leak.
func churnPod(i int) string {
	return fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: churn-%03d}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - {name: disk, emptyDir: {}}
  - {name: mem, emptyDir: {medium: Memory, sizeLimit: 4Mi}}
  - {name: cfg, configMap: {name: app-config}}
  containers:
  - name: c
    image: BUSYBOX
    command: [sh, -c, "echo x > /disk/x && echo y > /mem/y && exec sleep 3600"]
    volumeMounts: [{name: disk, mountPath: /disk}, {name: mem, mountPath: /mem}, {name: cfg, mountPath: /cfg}]
`, i)
}

// churn applies n pods, at most par at a time in flight, waits for them
// to run, and deletes them.
func churn(t *testing.T, r *rig, m *lifecycle.Manager, n int, during func(i int)) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i++ {
		if _, err := m.Apply(ctx, r.pods(t, churnPod(i)), lifecycle.SourceAPI); err != nil {
			t.Fatal(err)
		}
		if during != nil {
			during(i)
		}
	}
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			defer cancel()
			name := fmt.Sprintf("churn-%03d", i)
			if err := m.Wait(wctx, "default", name, func(p *corev1.Pod, ok bool) bool { return ok && running(p) }); err != nil {
				p, _ := m.Get("default", name)
				t.Errorf("pod %s never ran: %v (status %+v)", name, err, p.Status)
			}
		}()
	}
	wg.Wait()
	for i := 0; i < n; i++ {
		if err := m.Delete(ctx, "default", fmt.Sprintf("churn-%03d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		waitGone(t, m, fmt.Sprintf("churn-%03d", i))
	}
}

// TestChurnWithVolumesAndNetworksLeavesNothing is the check: a
// churn of 100 pods with volumes and networks leaves no mount, directory,
// veth, netns or IP behind.
func TestChurnWithVolumesAndNetworksLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("100 pods: not in -short")
	}
	r := newRig(t)
	m, _ := r.manager(t)
	writeSource(t, r.sources, "configmaps", "app-config", "greeting", "hello")
	start := time.Now()
	churn(t, r, m, 100, nil)
	t.Logf("100 pods applied, running, removed in %v", time.Since(start).Round(time.Millisecond))
	if left := r.leftovers(t); len(left) > 0 {
		t.Errorf("left after a churn of 100 pods: %v", left)
	}
}

// TestNetworkGCAfterContainerdCrash kills containerd while sandboxes are
// being created (CNI ADDs in flight), restarts it, lets the pods run and
// go, and then the collector must leave no IP, veth or netns behind.
func TestNetworkGCAfterContainerdCrash(t *testing.T) {
	r := newRig(t)
	t.Cleanup(func() {
		if t.Failed() { // what containerd made of the crash, for the record
			b, _ := os.ReadFile(r.env.LogFile())
			t.Logf("containerd's log, last 16 KiB:\n%s", b[max(0, len(b)-16<<10):])
		}
	})
	m, _ := r.manager(t)
	writeSource(t, r.sources, "configmaps", "app-config", "greeting", "hello")
	killed := false
	churn(t, r, m, 12, func(i int) {
		if i == 8 && !killed {
			time.Sleep(300 * time.Millisecond) // sandboxes are being created now
			if err := r.env.KillContainerd(); err != nil {
				t.Fatal(err)
			}
			killed = true
			time.Sleep(500 * time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := r.env.Restart(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
	// What a runtime that crashes between CNI ADD and persisting its
	// sandbox leaves (containerd 1.6 recovers most of it itself, so the
	// crash above may leave nothing): an attachment made behind its back,
	// with a netns file in its netns directory, a veth on the bridge and
	// an IP lease, for a sandbox it has never heard of. Its netns is named
	// as containerd names its own (cni-<uuid>): a namespace of another
	// name there is someone else's, and collection leaves it.
	ctx := context.Background()
	d, err := netplumb.NewDirect(ctx, r.env.NetworkConfig(), r.env.NetNS(), r.env.NetNSDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Add(ctx, "cni-c4a5ed00-0000-4000-8000-000000000001", netplumb.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	before := r.leftovers(t)
	t.Logf("left by the crash before collection: %v", before)
	if len(before) < 3 {
		t.Fatalf("the planted leak is not visible: %v", before)
	}
	m.GC(ctx)
	if left := r.leftovers(t); len(left) > 0 {
		t.Errorf("left after collection: %v", left)
	}
}
