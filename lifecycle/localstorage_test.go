package lifecycle_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// evictionWait bounds the wait for a local-storage eviction: the check
// runs every 10 s (the kubelet's eviction-manager period) and containerd
// refreshes writable-layer figures every 10 s, so a write is acted upon
// within about 20 s of landing; the rest is slack for a loaded machine.
const evictionWait = 90 * time.Second

// waitEvicted waits until the pod is Failed with reason Evicted and
// returns it; it fails the test with the last status otherwise.
func waitEvicted(t *testing.T, m *lifecycle.Manager, name string) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), evictionWait)
	defer cancel()
	var last *corev1.Pod
	err := m.Wait(ctx, "default", name, func(p *corev1.Pod, ok bool) bool {
		last = p
		return ok && p.Status.Phase == corev1.PodFailed && p.Status.Reason == lifecycle.ReasonEvicted
	})
	if err != nil {
		var st corev1.PodStatus
		if last != nil {
			st = last.Status
		}
		t.Fatalf("pod %s never evicted: %v; last phase %q reason %q message %q", name, err, st.Phase, st.Reason, st.Message)
	}
	return last
}

// waitNoSandbox waits until the runtime has no sandbox of the pod: an
// evicted pod's containers are stopped and removed, not just marked.
func (r *rig) waitNoSandbox(t *testing.T, p *corev1.Pod) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		sbs, err := r.client.ListPodSandbox(ctx, map[string]string{cri.PodUIDLabel: string(p.UID)})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if len(sbs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("evicted pod %s still has %d sandbox(es)", p.Name, len(sbs))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// removeAtEnd deletes the pods before the manager stops, so that their
// volumes (a tmpfs among them) are unmounted and removed.
func removeAtEnd(t *testing.T, m *lifecycle.Manager, names ...string) {
	t.Cleanup(func() {
		for _, n := range names {
			if err := m.Delete(context.Background(), "default", n); err != nil {
				t.Errorf("delete %s: %v", n, err)
				continue
			}
			waitGone(t, m, n)
		}
	})
}

// tmpfsPod fills an 8 MiB memory emptyDir whose sizeLimit is 16Mi, with
// an ephemeral-storage limit of 4Mi: memory-backed volumes count towards
// memory, not local storage, so it must survive.
const tmpfsPod = `
apiVersion: v1
kind: Pod
metadata: {name: tmpfs}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - {name: mem, emptyDir: {medium: Memory, sizeLimit: 16Mi}}
  containers:
  - name: main
    image: BUSYBOX
    command: [sh, -c, "dd if=/dev/zero of=/mem/f bs=1M count=8 2>/dev/null && touch /mem/done && exec sleep 3600"]
    volumeMounts: [{name: mem, mountPath: /mem}]
    resources:
      limits: {ephemeral-storage: 4Mi, memory: 64Mi}
`

// scratchPod writes 8 MiB into an emptyDir whose sizeLimit is 4Mi.
const scratchPod = `
apiVersion: v1
kind: Pod
metadata: {name: scratch}
spec:
  terminationGracePeriodSeconds: 30
  volumes:
  - {name: cache, emptyDir: {}}
  - {name: scratch, emptyDir: {sizeLimit: 4Mi}}
  containers:
  - name: main
    image: BUSYBOX
    command: [sh, -c, "dd if=/dev/zero of=/scratch/f bs=1M count=8 2>/dev/null && sync && exec sleep 3600"]
    volumeMounts:
    - {name: cache, mountPath: /cache}
    - {name: scratch, mountPath: /scratch}
`

// TestEmptyDirOverItsSizeLimitIsEvicted: the kubelet's emptyDirLimitEviction
// against a real containerd. The pod is Failed, reason Evicted, with the
// kubelet's message, and torn down; a pod whose memory emptyDir holds more
// than its ephemeral-storage limit is not evicted.
func TestEmptyDirOverItsSizeLimitIsEvicted(t *testing.T) {
	r := newRig(t)
	m, _ := r.manager(t)
	ctx := context.Background()
	removeAtEnd(t, m, "tmpfs", "scratch")

	// The tmpfs pod has filled its volume before the scratch pod exists,
	// so the check that evicts the scratch pod has measured it too.
	if _, err := m.Apply(ctx, r.pods(t, tmpfsPod), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	waitPod(t, m, "tmpfs", "ran", running)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, _, code := r.exec(t, m, "tmpfs", "main", "test", "-e", "/mem/done"); code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the tmpfs pod never filled its memory emptyDir")
		}
		time.Sleep(100 * time.Millisecond)
	}

	if _, err := m.Apply(ctx, r.pods(t, scratchPod), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	p := waitEvicted(t, m, "scratch")
	const want = `Usage of EmptyDir volume "scratch" exceeds the limit "4Mi". `
	if p.Status.Message != want {
		t.Errorf("evicted with message %q, want the kubelet's %q", p.Status.Message, want)
	}
	r.waitNoSandbox(t, p)

	if p, ok := m.Get("default", "tmpfs"); !ok || !running(p) {
		t.Errorf("the pod with 8 MiB in a memory emptyDir and a 4Mi ephemeral-storage limit was not left running: %+v", p.Status)
	}
}

// layerPod writes 8 MiB into its container's writable layer, past the
// pod's ephemeral-storage limit of 4Mi (its only container's).
const layerPod = `
apiVersion: v1
kind: Pod
metadata: {name: layer}
spec:
  terminationGracePeriodSeconds: 30
  containers:
  - name: main
    image: BUSYBOX
    command: [sh, -c, "dd if=/dev/zero of=/fill bs=1M count=8 2>/dev/null && sync && exec sleep 3600"]
    resources:
      limits: {ephemeral-storage: 4Mi}
`

// talkerPod's talker logs about 9 MB (6 MB of output in short lines, with
// the CRI log format's timestamps), past its own 4Mi limit but within the
// pod's 68Mi.
const talkerPod = `
apiVersion: v1
kind: Pod
metadata: {name: chatty}
spec:
  terminationGracePeriodSeconds: 30
  containers:
  - name: quiet
    image: BUSYBOX
    command: [sleep, "3600"]
    resources:
      limits: {ephemeral-storage: 64Mi}
  - name: talker
    image: BUSYBOX
    command: [sh, -c, "yes 0123456789012345678901234567890123456789012345678901234567890123456789 | head -c 6000000; exec sleep 3600"]
    resources:
      limits: {ephemeral-storage: 4Mi}
`

// TestEphemeralStorageLimitIsEvicted: the kubelet's
// podEphemeralStorageLimitEviction (a writable layer past the pod's total)
// and containerEphemeralStorageLimitEviction (one container's logs past
// its own limit), against a real containerd.
func TestEphemeralStorageLimitIsEvicted(t *testing.T) {
	r := newRig(t)
	m, _ := r.manager(t)
	ctx := context.Background()
	removeAtEnd(t, m, "layer", "chatty")
	if _, err := m.Apply(ctx, append(r.pods(t, layerPod), r.pods(t, talkerPod)...), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ pod, want string }{
		{"layer", "Pod ephemeral local storage usage exceeds the total limit of containers 4Mi. "},
		{"chatty", `Container talker exceeded its local ephemeral storage limit "4Mi". `},
	} {
		p := waitEvicted(t, m, c.pod)
		if p.Status.Message != c.want {
			t.Errorf("pod %s evicted with message %q, want the kubelet's %q", c.pod, p.Status.Message, c.want)
		}
		r.waitNoSandbox(t, p)
	}
}
