//go:build nodelane

package nodelane

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/lab/images"
	"github.com/nodeguard/nodeguard/lab/nodevm"
)

var imageVolumePod = podRef{Namespace: "lane", Name: "image-volume", File: "testdata/image-volume.yaml", QOS: corev1.PodQOSBurstable}

// criStateDir is containerd's CRI state directory (its default), beneath
// which containerd 2.1 and later mount a pod's image volumes:
// image-volumes/<sandbox id>/<image digest>.
const criStateDir = "/run/containerd/io.containerd.grpc.v1.cri"

// imageVolume runs a pod whose volume is an image (KEP-4639) on the
// runtime that mounts image volumes (containerd 2.x): the container reads
// a file of known bytes from the volume, and from a subPath of it; the
// volume is read-only though the volumeMount does not say so; it is
// containerd's mount, beneath the sandbox's image-volumes directory, and
// gone once the pod is deleted. On Debian's containerd 1.6.20, which
// ignores CRI Mount.image, the pod is refused at apply, naming the
// runtime and what it needs, and nothing runs.
func (n *node) imageVolume(t *testing.T) {
	n.ensureAgent(t)
	if n.runtime != nodevm.ContainerdV2 {
		out, err := applyPods(imageVolumePod.File)
		if err == nil {
			deletePod(t, imageVolumePod)
			t.Fatalf("containerd %s mounts no image volume, and nodeguard accepted the pod: %s", n.runtime, out)
		}
		for _, want := range []string{"spec.volumes[0].image", "cannot mount image volumes", "containerd 1.6", "containerd 2.1 or later"} {
			if !strings.Contains(out, want) {
				t.Errorf("the refusal does not say %q: %v %s", want, err, out)
			}
		}
		l, err := listPods()
		if err != nil {
			t.Fatal(err)
		}
		if findPod(l, imageVolumePod.Namespace, imageVolumePod.Name) != nil {
			t.Errorf("the refused pod is listed: %s", describePods(l))
		}
		t.Logf("refused on containerd %s: %s", n.runtime, strings.TrimSpace(out))
		return
	}
	if out, err := applyPods(imageVolumePod.File); err != nil {
		t.Fatalf("nodeguard pod apply -f %s: %v %s", imageVolumePod.File, err, out)
	}
	deleted := false
	defer func() {
		if !deleted {
			deletePod(t, imageVolumePod)
		}
	}()
	pod := waitPodRunning(t, imageVolumePod, podsBound)
	cs, err := podContainers(string(pod.UID))
	if err != nil || len(cs) != 1 {
		t.Fatalf("the pod's running containers: %v (%v)", cs, err)
	}
	ctr := cs[0]

	for _, p := range []string{"/volume/etc/group", "/volume-etc/group"} {
		out, err := crictl("exec", ctr.ID, "cat", p)
		if err != nil {
			t.Errorf("crictl exec cat %s: %v %s", p, err, out)
			continue
		}
		if string(out) != images.BusyboxGroup {
			t.Errorf("%s is %q, want the busybox image's /etc/group %q", p, out, images.BusyboxGroup)
		}
	}
	if out, err := crictl("exec", ctr.ID, "touch", "/volume/written"); err == nil {
		t.Errorf("a file was written into the image volume: %s", out)
	} else if !strings.Contains(string(out)+err.Error(), "Read-only file system") {
		t.Errorf("touch /volume/written failed, but not as a read-only mount: %v %s", err, out)
	}
	mi, err := crictl("exec", ctr.ID, "cat", "/proc/self/mountinfo")
	if err != nil {
		t.Fatalf("crictl exec cat /proc/self/mountinfo: %v", err)
	}
	for _, target := range []string{"/volume", "/volume-etc"} {
		opts, ok := mountOptions(string(mi), target)
		if !ok || !strings.Contains(","+opts+",", ",ro,") {
			t.Errorf("%s in the container: mounted %v, options %q; want a read-only mount", target, ok, opts)
		}
	}

	sandbox := ctr.PodSandboxID
	dirs, err := filepath.Glob(filepath.Join(criStateDir, "image-volumes", sandbox, "*"))
	if err != nil {
		t.Fatal(err)
	}
	hostMounts := func() []string {
		b, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		ms, err := MountsBelow(b, filepath.Join(criStateDir, "image-volumes", sandbox))
		if err != nil {
			t.Fatal(err)
		}
		return ms
	}
	if ms := hostMounts(); len(dirs) != 1 || len(ms) == 0 {
		t.Errorf("containerd's image volume of sandbox %s: directories %v, mounts %v; want one image mounted", sandbox, dirs, ms)
	} else {
		t.Logf("the image volume is containerd's mount %v", ms)
	}

	deletePod(t, imageVolumePod)
	deleted = true
	if ms := hostMounts(); len(ms) > 0 {
		t.Errorf("after the pod's deletion the image volume is still mounted: %v", ms)
	}
	if _, err := os.Lstat(filepath.Join(criStateDir, "image-volumes", sandbox)); !os.IsNotExist(err) {
		t.Errorf("after the pod's deletion its image volume directory remains: %v", err)
	}
}

// mountOptions returns the per-mount options of the mount at target in
// mountinfo (the last one there: it covers the others), and whether there
// is one.
func mountOptions(mountinfo, target string) (string, bool) {
	var opts string
	found := false
	for _, line := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(line)
		if len(f) >= 6 && f[4] == target {
			opts, found = f[5], true
		}
	}
	return opts, found
}
