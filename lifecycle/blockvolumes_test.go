package lifecycle_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/lab/looptest"
	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// writeStorage puts a PersistentVolumeClaim default/<claim> and a local
// PersistentVolume <pv> bound to it by its claimRef into the rig's source
// directory; mode is the volumeMode of both.
func (r *rig) writeStorage(t *testing.T, claim, pv, path string, mode corev1.PersistentVolumeMode) {
	t.Helper()
	write := func(rel, body string) {
		p := filepath.Join(r.sources, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join("persistentvolumeclaims", "default", claim+".yaml"), `apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: `+claim+`}
spec:
  accessModes: [ReadWriteOnce]
  volumeMode: `+string(mode)+`
  resources: {requests: {storage: 16Mi}}
`)
	write(filepath.Join("persistentvolumes", pv+".yaml"), `apiVersion: v1
kind: PersistentVolume
metadata: {name: `+pv+`}
spec:
  capacity: {storage: 64Mi}
  accessModes: [ReadWriteOnce]
  volumeMode: `+string(mode)+`
  claimRef: {namespace: default, name: `+claim+`}
  local: {path: `+path+`}
`)
}

// podMounts lists the mounts beneath the rig's pod directories.
func (r *rig) podMounts(t *testing.T) []string {
	t.Helper()
	root, err := filepath.EvalSymlinks(r.root)
	if err != nil {
		t.Fatal(err)
	}
	infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(filepath.Join(root, "pods")))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mi := range infos {
		out = append(out, mi.Mountpoint)
	}
	return out
}

// readDevice mounts the ext4 file system of dev read-only on a temporary
// directory of its own and returns the content of name there. The mount is
// EBUSY while the file system is still mounted read-write somewhere: in
// the mount namespace of a container that has just exited, which the
// kernel releases shortly after; it is tried for up to 10 s.
func readDevice(t *testing.T, dev, name string) string {
	t.Helper()
	dir := t.TempDir()
	var err error
	for range 100 {
		if err = unix.Mount(dev, dir, "ext4", unix.MS_RDONLY, ""); !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("mount %s elsewhere: %v", dev, err)
	}
	defer func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	}()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("read %s on %s: %v", name, dev, err)
	}
	return string(b)
}

// waitOutput runs cmd in the pod's container until it prints want:
// Running says the container started, not that its shell got as far as
// writing. It fails after 10 s.
func waitOutput(t *testing.T, m *lifecycle.Manager, pod string, cmd []string, want string) {
	t.Helper()
	var last string
	var err error
	for range 100 {
		var res cri.ExecResult
		if res, err = m.Exec(context.Background(), "default", pod, "", cmd, 5*time.Second); err == nil && string(res.Stdout) == want {
			return
		}
		last = string(res.Stdout) + string(res.Stderr)
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%v in pod %s printed %q (%v), want %q", cmd, pod, last, err, want)
}

const claimPod = `
apiVersion: v1
kind: Pod
metadata: {name: NAME}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: BUSYBOX
    command: [sh, -c, "CMD; exec sleep 3600"]
    volumeMounts: [{name: data, mountPath: /data}]
  volumes:
  - name: data
    persistentVolumeClaim: {claimName: data}
`

func (r *rig) claimPod(t *testing.T, name, cmd string) []*corev1.Pod {
	return r.pods(t, strings.NewReplacer("NAME", name, "CMD", cmd).Replace(claimPod))
}

func TestLocalBlockVolumeAgainstARealContainerd(t *testing.T) {
	looptest.NeedTools(t, "mkfs.ext4", "blkid")
	dev := looptest.Attach(t, 64<<20)
	r := newRig(t)
	m, _ := r.manager(t)
	ctx := context.Background()

	// The claim is not there yet: the pod waits, saying so, and runs once
	// the claim and its volume appear.
	if _, err := m.Apply(ctx, r.claimPod(t, "writer", "echo from-writer > /data/f && sync"), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, m, "writer", "said the claim is missing", func(p *corev1.Pod) bool {
		return strings.Contains(p.Status.Message, `persistentvolumeclaim "data" not found`)
	})
	if p.Status.Phase != corev1.PodPending {
		t.Errorf("phase %s with a missing claim, want Pending", p.Status.Phase)
	}
	r.writeStorage(t, "data", "disk1", dev, corev1.PersistentVolumeFilesystem)
	waitPod(t, m, "writer", "ran", running)
	waitOutput(t, m, "writer", []string{"cat", "/data/f"}, "from-writer\n")
	res, err := m.Exec(ctx, "default", "writer", "", []string{"grep", " /data ", "/proc/mounts"}, 5*time.Second)
	if err != nil || !strings.Contains(string(res.Stdout), " ext4 ") {
		t.Errorf("/data in the container: %q (%v), want an ext4 mount", res.Stdout, err)
	}
	if err := m.Delete(ctx, "default", "writer"); err != nil {
		t.Fatal(err)
	}
	waitGone(t, m, "writer")
	if ms := r.podMounts(t); len(ms) != 0 {
		t.Fatalf("mounts left after the pod's deletion: %v", ms)
	}
	if got := readDevice(t, dev, "f"); got != "from-writer\n" {
		t.Errorf("the device mounted elsewhere has %q, want the container's file", got)
	}

	// A second pod finds the file system the first made.
	if _, err := m.Apply(ctx, r.claimPod(t, "reader", "true"), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	waitPod(t, m, "reader", "ran", running)
	res, err = m.Exec(ctx, "default", "reader", "", []string{"cat", "/data/f"}, 5*time.Second)
	if err != nil || string(res.Stdout) != "from-writer\n" {
		t.Errorf("the second pod reads %q (%v), want the first pod's file: the device must not be formatted again", res.Stdout, err)
	}
	if err := m.Delete(ctx, "default", "reader"); err != nil {
		t.Fatal(err)
	}
	waitGone(t, m, "reader")
	if ms := r.podMounts(t); len(ms) != 0 {
		t.Fatalf("mounts left after the second pod's deletion: %v", ms)
	}
}

const rawPod = `
apiVersion: v1
kind: Pod
metadata: {name: raw}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: BUSYBOX
    command: [sh, -c, "test -b /dev/xvda && printf nodeguard-raw-block | dd of=/dev/xvda conv=fsync 2>/dev/null; exec sleep 3600"]
    volumeDevices: [{name: disk, devicePath: /dev/xvda}]
  volumes:
  - name: disk
    persistentVolumeClaim: {claimName: raw}
`

func TestRawBlockVolumeAgainstARealContainerd(t *testing.T) {
	dev := looptest.Attach(t, 16<<20)
	r := newRig(t)
	r.writeStorage(t, "raw", "rawdisk", dev, corev1.PersistentVolumeBlock)
	m, _ := r.manager(t)
	ctx := context.Background()
	if _, err := m.Apply(ctx, r.pods(t, rawPod), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	waitPod(t, m, "raw", "ran", running)
	const want = "nodeguard-raw-block"
	waitOutput(t, m, "raw", []string{"dd", "if=/dev/xvda", "bs=19", "count=1"}, want)
	f, err := os.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(want))
	_, err = f.ReadAt(buf, 0)
	f.Close()
	if err != nil || string(buf) != want {
		t.Errorf("%s starts with %q (%v), want what the container wrote", dev, buf, err)
	}
	if err := m.Delete(ctx, "default", "raw"); err != nil {
		t.Fatal(err)
	}
	waitGone(t, m, "raw")
	if ms := r.podMounts(t); len(ms) != 0 {
		t.Fatalf("mounts left after the pod's deletion: %v", ms)
	}
}

// A nodeguard killed while it deletes a pod (after the pod's record is
// gone, before its teardown) leaves the pod's sandbox and its mounted
// volume; the next one tears down the sandbox and unmounts the volume.
func TestStaleBlockVolumeMountsAreRemovedAfterAKill(t *testing.T) {
	looptest.NeedTools(t, "mkfs.ext4", "blkid")
	dev := looptest.Attach(t, 64<<20)
	r := newRig(t)
	r.writeStorage(t, "data", "disk1", dev, corev1.PersistentVolumeFilesystem)
	m, stop := r.manager(t)
	ctx := context.Background()
	if _, err := m.Apply(ctx, r.claimPod(t, "victim", "echo kept > /data/f && sync"), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, m, "victim", "ran", running)
	waitOutput(t, m, "victim", []string{"cat", "/data/f"}, "kept\n")
	stop() // no teardown: the Manager just stops, as a killed process would
	if ms := r.podMounts(t); len(ms) == 0 {
		t.Fatal("no volume mount beneath the pod directories after the stop: nothing to test")
	}
	r.forgetPersisted(t, p)

	r.manager(t)
	// The pod's directory goes last, after its unmount: waited for too
	// (checked once the mounts were gone, it was still there under load).
	podDir := filepath.Join(r.root, "pods", string(p.UID))
	dirLeft := func() bool { _, err := os.Stat(podDir); return !os.IsNotExist(err) }
	deadline := time.Now().Add(30 * time.Second)
	for len(r.podMounts(t)) > 0 || r.sandboxes(t) > 0 || dirLeft() {
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the restart: mounts %v, %d sandboxes, the stale pod's directory left %v", r.podMounts(t), r.sandboxes(t), dirLeft())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := readDevice(t, dev, "f"); got != "kept\n" {
		t.Errorf("the device has %q after the cleanup, want the pod's file", got)
	}
}
