package lifecycle_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/lifecycle"
)

// fieldsPods are two pods whose second container reports what it sees:
// its hostname, its /etc/hosts, and whether the first container's process
// (sleep 3601, a number its own command line does not contain) is among
// its processes. Only "shared" shares its process namespace.
const fieldsPods = `
apiVersion: v1
kind: Pod
metadata: {name: shared}
spec:
  terminationGracePeriodSeconds: 1
  hostname: box
  subdomain: web
  shareProcessNamespace: true
  serviceAccountName: builder
  hostAliases:
  - {ip: 10.1.2.3, hostnames: [db, db.example.com]}
  containers:
  - {name: a, image: BUSYBOX, command: [sh, -c, "exec sleep 3601"]}
  - name: b
    image: BUSYBOX
    command:
    - sh
    - -c
    - |
      echo hostname=$(hostname)
      cat /etc/hosts
      seen=no
      for i in $(seq 20); do
        if for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -q '^sleep 36[0]1'; then seen=yes; break; fi
        sleep 0.1
      done
      echo seen=$seen
      exec sleep 3600
---
apiVersion: v1
kind: Pod
metadata: {name: apart}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: a, image: BUSYBOX, command: [sh, -c, "exec sleep 3601"]}
  - name: b
    image: BUSYBOX
    command:
    - sh
    - -c
    - |
      seen=no
      for i in $(seq 20); do
        if for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -q '^sleep 36[0]1'; then seen=yes; break; fi
        sleep 0.1
      done
      echo seen=$seen
      exec sleep 3600
`

func TestPodFieldsReachTheContainers(t *testing.T) {
	r := newRig(t)
	var logs bytes.Buffer
	r.logs = &logs
	m, _ := r.manager(t)
	ctx := context.Background()
	if _, err := m.Apply(ctx, r.pods(t, fieldsPods), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, name := range []string{"shared", "apart"} {
			m.Delete(ctx, "default", name)
			waitGone(t, m, name)
		}
	})
	report := func(name string) (string, *corev1.Pod) {
		var out bytes.Buffer
		p := waitPod(t, m, name, "reported", func(p *corev1.Pod) bool {
			out.Reset()
			return running(p) && m.Logs(ctx, "default", name, lifecycle.LogOptions{Container: "b", Tail: -1}, &out) == nil &&
				strings.Contains(out.String(), "seen=")
		})
		return out.String(), p
	}
	shared, p := report("shared")
	apart, _ := report("apart")
	t.Logf("shared's container b reported:\n%s", shared)

	t.Run("the hostname is spec.hostname", func(t *testing.T) {
		if !strings.Contains(shared, "hostname=box\n") {
			t.Errorf("no hostname=box in %q", shared)
		}
	})
	t.Run("/etc/hosts is the kubelet's managed file with the pod's IP and hostAliases", func(t *testing.T) {
		for _, want := range []string{
			"# Kubernetes-managed hosts file.\n",
			"127.0.0.1\tlocalhost\n",
			p.Status.PodIP + "\tbox\n", // no cluster domain: no FQDN for the subdomain
			"# Entries added by HostAliases.\n10.1.2.3\tdb\n10.1.2.3\tdb.example.com\n",
		} {
			if !strings.Contains(shared, want) {
				t.Errorf("no %q in /etc/hosts:\n%s", want, shared)
			}
		}
	})
	t.Run("shareProcessNamespace lets one container see another's processes", func(t *testing.T) {
		if !strings.Contains(shared, "seen=yes") {
			t.Errorf("container b of shared did not see a's sleep 3601: %q", shared)
		}
		if !strings.Contains(apart, "seen=no") {
			t.Errorf("container b of apart saw a's process without shareProcessNamespace: %q", apart)
		}
	})
	t.Run("a named service account is told to get no token, once", func(t *testing.T) {
		line := `msg="no service account token mounted: there is no control plane to issue one" pod=default/shared service_account=builder`
		if n := strings.Count(logs.String(), line); n != 1 {
			t.Errorf("%d lines %q in the log, want 1", n, line)
		}
		if strings.Contains(logs.String(), "token mounted: there is no control plane to issue one\" pod=default/apart") {
			t.Error("a pod that names no service account was told about its token")
		}
	})
}

func TestActiveDeadlineEndsThePod(t *testing.T) {
	r := newRig(t)
	m, _ := r.manager(t)
	ctx := context.Background()
	pods := r.pods(t, `
apiVersion: v1
kind: Pod
metadata: {name: deadline}
spec:
  activeDeadlineSeconds: 2
  terminationGracePeriodSeconds: 1
  containers:
  - {name: c, image: BUSYBOX, command: [sh, -c, "exec sleep 3600"]}
`)
	if _, err := m.Apply(ctx, pods, lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Delete(ctx, "default", "deadline")
		waitGone(t, m, "deadline")
	})
	waitPod(t, m, "deadline", "ran", running)
	p := waitPod(t, m, "deadline", "failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if p.Status.Reason != lifecycle.ReasonDeadlineExceeded || p.Status.Message != lifecycle.MessageDeadlineExceeded {
		t.Errorf("status reason %q message %q, want %q %q", p.Status.Reason, p.Status.Message,
			lifecycle.ReasonDeadlineExceeded, lifecycle.MessageDeadlineExceeded)
	}
	// Its sandbox (and so its container) goes; the pod stays, Failed.
	deadline := time.Now().Add(30 * time.Second)
	for r.sandboxes(t) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the sandbox of a pod past its deadline is still there after 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got, ok := m.Get("default", "deadline"); !ok || got.Status.Reason != lifecycle.ReasonDeadlineExceeded {
		t.Errorf("after teardown: %v %+v, want the pod kept with reason DeadlineExceeded", ok, got)
	}
}

func TestANodeSelectorTheNodeDoesNotMatchIsRejected(t *testing.T) {
	r := newRig(t)
	m, _ := r.manager(t)
	pod := func(selector string) []*corev1.Pod {
		return r.pods(t, fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: picky}
spec:
  nodeSelector: {%s}
  containers:
  - {name: c, image: BUSYBOX}
`, selector))
	}
	_, err := m.Apply(context.Background(), pod(`kubernetes.io/arch: no-such-arch`), lifecycle.SourceAPI)
	if !errors.Is(err, lifecycle.ErrRejected) || !strings.Contains(err.Error(), "NodeAffinity: Predicate NodeAffinity failed") {
		t.Fatalf("Apply = %v, want ErrRejected with NodeAffinity: Predicate NodeAffinity failed", err)
	}
	if _, ok := m.Get("default", "picky"); ok {
		t.Error("a rejected pod is desired")
	}
	if _, err := m.Apply(context.Background(), pod(`kubernetes.io/os: linux`), lifecycle.SourceAPI); err != nil {
		t.Fatalf("a nodeSelector the node matches: %v", err)
	}
	m.Delete(context.Background(), "default", "picky")
	waitGone(t, m, "picky")
}

// TestAnAdoptedPodKeepsItsStartTime restarts nodeguard under a running pod:
// the adopted pod's startTime is its sandbox's creation, so its active
// deadline is not restarted by the restart.
func TestAnAdoptedPodKeepsItsStartTime(t *testing.T) {
	r := newRig(t)
	m, stop := r.manager(t)
	ctx := context.Background()
	pods := r.pods(t, `
apiVersion: v1
kind: Pod
metadata: {name: kept}
spec:
  activeDeadlineSeconds: 3
  terminationGracePeriodSeconds: 1
  containers:
  - {name: c, image: BUSYBOX, command: [sh, -c, "exec sleep 3600"]}
`)
	if _, err := m.Apply(ctx, pods, lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	before := waitPod(t, m, "kept", "ran", running)
	stop()
	restarted := time.Now()
	m2, _ := r.manager(t)
	t.Cleanup(func() {
		m2.Delete(ctx, "default", "kept")
		waitGone(t, m2, "kept")
	})
	after := waitPod(t, m2, "kept", "was adopted", running)
	if !after.Status.StartTime.Time.Before(restarted) {
		t.Errorf("startTime %v after adoption, want the sandbox's creation, before the restart at %v (first startTime %v)",
			after.Status.StartTime, restarted, before.Status.StartTime)
	}
	failed := waitPod(t, m2, "kept", "failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if failed.Status.Reason != lifecycle.ReasonDeadlineExceeded {
		t.Errorf("reason %q, want %q", failed.Status.Reason, lifecycle.ReasonDeadlineExceeded)
	}
}
