//go:build nodelane

package nodelane

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	corev1 "k8s.io/api/core/v1"
)

// The block check's storage: two files in the guest's root file system
// (qemu's snapshot takes the writes: the cached image stays clean) on loop
// devices the check attaches and detaches, and their PersistentVolumes and
// claims in volumes.sourceDir, as an administrator writes them.
const (
	blockDir = "/var/lib/nodelane-block"
	// blockSize: room for an ext4 file system with a journal; the files
	// are sparse.
	blockSize = 64 << 20
	// The PersistentVolumes, bound by their claimRef to lane/data and
	// lane/raw.
	blockPV = "lane-disk"
	rawPV   = "lane-raw"
	// rawMark is what the pod writes at the start of the raw device.
	rawMark = "nodeguard-raw-block"
)

// blockDisks are the loop devices of the block check.
type blockDisks struct {
	fs, raw string // /dev/loopN
}

// attachLoop makes a sparse file of blockSize and attaches it to a free
// loop device; t's cleanup detaches it and removes the file.
func attachLoop(t *testing.T, name string) string {
	t.Helper()
	file := filepath.Join(blockDir, name+".img")
	f, err := os.Create(file)
	if err == nil {
		err = f.Truncate(blockSize)
		f.Close()
	}
	if err != nil {
		t.Fatalf("make %s: %v", file, err)
	}
	out, err := run(cmdTimeout, "losetup", "--find", "--show", file)
	if err != nil {
		os.Remove(file)
		t.Fatalf("attach %s to a loop device: %v", file, err)
	}
	dev := strings.TrimSpace(out)
	t.Cleanup(func() {
		if out, err := run(cmdTimeout, "losetup", "--detach", dev); err != nil {
			t.Errorf("detach %s: %v %s", dev, err, out)
		}
		os.Remove(file)
	})
	return dev
}

// sourceDir is the configuration's volumes.sourceDir (the documented
// default when it has none).
func (n *node) sourceDir() string {
	if v, ok, _ := Lookup(n.current, "volumes", "sourceDir"); ok && fmt.Sprint(v) != "" {
		return fmt.Sprint(v)
	}
	return "/etc/nodeguard/sources"
}

// blockStorage attaches the two loop devices and writes their
// PersistentVolumes and claims; t's cleanup removes them.
func (n *node) blockStorage(t *testing.T) blockDisks {
	t.Helper()
	if out, err := run(cmdTimeout, "modprobe", "loop"); err != nil {
		t.Fatalf("load the loop module (the root filesystem keeps drivers/block): %v %s", err, out)
	}
	if err := os.MkdirAll(blockDir, 0o700); err != nil {
		t.Fatal(err)
	}
	d := blockDisks{fs: attachLoop(t, "fs"), raw: attachLoop(t, "raw")}
	src := n.sourceDir()
	write := func(rel, body string) {
		p := filepath.Join(src, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(p) })
	}
	for _, v := range []struct {
		claim, pv, dev string
		mode           corev1.PersistentVolumeMode
	}{{"data", blockPV, d.fs, corev1.PersistentVolumeFilesystem}, {"raw", rawPV, d.raw, corev1.PersistentVolumeBlock}} {
		write(filepath.Join("persistentvolumeclaims", blockPod.Namespace, v.claim+".yaml"), `apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: `+v.claim+`, namespace: `+blockPod.Namespace+`}
spec:
  accessModes: [ReadWriteOnce]
  volumeMode: `+string(v.mode)+`
  resources: {requests: {storage: 16Mi}}
`)
		write(filepath.Join("persistentvolumes", v.pv+".yaml"), `apiVersion: v1
kind: PersistentVolume
metadata: {name: `+v.pv+`}
spec:
  capacity: {storage: 64Mi}
  accessModes: [ReadWriteOnce]
  volumeMode: `+string(v.mode)+`
  claimRef: {namespace: `+blockPod.Namespace+`, name: `+v.claim+`}
  local: {path: `+v.dev+`}
`)
	}
	return d
}

// blockVolumes checks testdata/block.yaml: the Filesystem volume formatted
// and mounted from its device, the file the pod wrote on it, the raw
// device written through its devicePath, and both released on deletion.
func blockVolumes(t *testing.T, rootDir string, d blockDisks, uids map[string]string) {
	pod := waitPodRunning(t, blockPod, podsBound)
	uid := string(pod.UID)
	uids[blockPod.Name] = uid
	dir := filepath.Join(rootDir, "pods", uid, "volumes", "kubernetes.io~local-volume", blockPV)
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(dir))
	if err != nil || len(ms) == 0 {
		t.Fatalf("no mount at %s (%v)", dir, err)
	}
	mi := ms[len(ms)-1]
	if mi.FSType != "ext4" || mi.Source != d.fs {
		t.Errorf("the volume is %s from %s, want ext4 from %s", mi.FSType, mi.Source, d.fs)
	}
	var in, raw string
	if _, err := waitFor("the pod's writes", podsBound, func() (bool, string, error) {
		in, _ = podExec(blockPod, "main", "cat", "/data/f")
		b := make([]byte, len(rawMark))
		if f, err := os.Open(d.raw); err == nil {
			_, _ = f.ReadAt(b, 0)
			f.Close()
		}
		raw = string(b)
		return in == "from-the-pod\n" && raw == rawMark, fmt.Sprintf("/data/f %q, %s starts with %q", in, d.raw, raw), nil
	}); err != nil {
		t.Fatal(err)
	}
	mounts, err := podExec(blockPod, "main", "grep", " /data ", "/proc/mounts")
	if err != nil || !strings.Contains(mounts, " ext4 ") {
		t.Errorf("/data in the container: %q (%v), want an ext4 mount", mounts, err)
	}
	if out, err := podExec(blockPod, "main", "test", "-b", "/dev/xvda"); err != nil {
		t.Errorf("/dev/xvda in the container is no block device: %v %s", err, out)
	}

	t0 := time.Now()
	rmPod(t, blockPod)
	waitUnmounted(t, rootDir, uid, deleteBound)
	// The device's file system, read with the pod gone and nothing of it
	// mounted: debugfs opens the device as it lies.
	typ, err := run(cmdTimeout, "blkid", "-o", "value", "-s", "TYPE", d.fs)
	if err != nil || strings.TrimSpace(typ) != "ext4" {
		t.Errorf("blkid %s: %q (%v), want ext4", d.fs, typ, err)
	}
	f, err := stdout(cmdTimeout, "debugfs", "-R", "cat /f", d.fs)
	if err != nil || string(f) != "from-the-pod\n" {
		t.Errorf("debugfs cat /f on %s: %q (%v), want the pod's file", d.fs, f, err)
	}
	t.Logf("%s formatted ext4 and mounted at %s (%s); the pod's file on it after the pod; %s starts with %q; the pod and its mounts gone %s after pod rm",
		d.fs, mi.Mountpoint, mi.Options, d.raw, raw, time.Since(t0).Round(time.Millisecond))
}
