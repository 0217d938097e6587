package mounts

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func emptyDirVol(name string, medium corev1.StorageMedium, size string) corev1.Volume {
	e := &corev1.EmptyDirVolumeSource{Medium: medium}
	if size != "" {
		e.SizeLimit = quantity(size)
	}
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: e}}
}

func TestEmptyDirOnDisk(t *testing.T) {
	env := newTestEnv(t)
	ctx := testCtx(t)
	pod := newPod("disk", []corev1.Volume{emptyDirVol("scratch", "", "")},
		mountAll(corev1.Container{Name: "app"}, corev1.VolumeMount{Name: "scratch", MountPath: "/scratch"}))
	pv, err := env.m.Setup(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	dir := env.m.VolumeDir("disk", PluginEmptyDir, "scratch")
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o777 {
		t.Errorf("emptyDir mode = %v, want 0777", st.Mode().Perm())
	}
	if got := mountsUnder(t, env.m.PodDir("disk")); len(got) != 0 {
		t.Errorf("a disk emptyDir has mounts: %v", got[0].Mountpoint)
	}
	ms, err := pv.Mounts(&pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	want := &runtimeapi.Mount{ContainerPath: "/scratch", HostPath: dir, Propagation: runtimeapi.MountPropagation_PROPAGATION_PRIVATE}
	if len(ms) != 1 || ms[0].String() != want.String() {
		t.Errorf("Mounts = %v, want [%v]", ms, want)
	}

	mustWrite(t, filepath.Join(dir, "a/b"), strings.Repeat("x", 10000))
	us, err := env.m.Usage("disk", pod)
	if err != nil {
		t.Fatal(err)
	}
	// root dir, a/, a/b: three inodes; at least the file's 10000 bytes.
	if len(us) != 1 || us[0].Inodes != 3 || us[0].Bytes < 10000 || us[0].Medium != MediumDisk {
		t.Errorf("Usage = %+v, want 3 inodes and >= 10000 bytes on Disk", us)
	}
	b, inodes, err := env.m.EphemeralStorageUsage("disk", pod)
	if err != nil || b != us[0].Bytes || inodes != 3 {
		t.Errorf("EphemeralStorageUsage = %d, %d, %v; want %d, 3", b, inodes, err, us[0].Bytes)
	}

	if err := env.m.Teardown(ctx, "disk"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(env.m.PodDir("disk")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pod dir after Teardown: %v", err)
	}
}

func TestEmptyDirInMemory(t *testing.T) {
	limited := func(name, mem string) corev1.Container {
		c := corev1.Container{Name: name}
		if mem != "" {
			c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: *quantity(mem)}
		}
		return c
	}
	tests := []struct {
		name       string
		sizeLimit  string
		containers []corev1.Container
		wantSize   uint64
	}{
		{"sizeLimit sizes the tmpfs", "1Mi", []corev1.Container{limited("a", "")}, 1 << 20},
		{"the pod's memory limit sizes it when every container has one", "", []corev1.Container{limited("a", "3Mi"), limited("b", "5Mi")}, 8 << 20},
		{"a sizeLimit above the pod's limit is capped to the limit", "32Mi", []corev1.Container{limited("a", "2Mi")}, 2 << 20},
		{"the node's memory sizes it when a container has no limit", "", []corev1.Container{limited("a", "3Mi"), limited("b", "")}, 64 << 20},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newTestEnv(t)
			ctx := testCtx(t)
			uid := "mem" + string(rune('0'+i))
			pod := newPod(uid, []corev1.Volume{emptyDirVol("shm", corev1.StorageMediumMemory, tt.sizeLimit)}, tt.containers...)
			if _, err := env.m.Setup(ctx, pod); err != nil {
				t.Fatal(err)
			}
			// Idempotent: a second Setup must not stack a second tmpfs.
			if _, err := env.m.Setup(ctx, pod); err != nil {
				t.Fatal(err)
			}
			dir := env.m.VolumeDir(pod.UID, PluginEmptyDir, "shm")
			ms := mountsUnder(t, dir)
			if len(ms) != 1 || ms[0].FSType != "tmpfs" {
				t.Fatalf("mounts at %s = %v, want one tmpfs", dir, ms)
			}
			for _, opt := range []string{"nosuid", "nodev"} {
				if !strings.Contains(ms[0].Options, opt) {
					t.Errorf("tmpfs options %q lack %s", ms[0].Options, opt)
				}
			}
			var st unix.Statfs_t
			if err := unix.Statfs(dir, &st); err != nil {
				t.Fatal(err)
			}
			if got := st.Blocks * uint64(st.Bsize); got != tt.wantSize {
				t.Errorf("tmpfs size = %d, want %d", got, tt.wantSize)
			}
			if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o777 {
				t.Errorf("tmpfs root = %v, %v; want mode 0777", fi.Mode(), err)
			}
			if err := env.m.Teardown(ctx, pod.UID); err != nil {
				t.Fatal(err)
			}
			if ms := mountsUnder(t, env.root); len(ms) != 0 {
				t.Errorf("mounts after Teardown: %v", ms[0].Mountpoint)
			}
		})
	}
}

func TestEmptyDirInMemoryIsFullAtItsSize(t *testing.T) {
	env := newTestEnv(t)
	ctx := testCtx(t)
	pod := newPod("full", []corev1.Volume{emptyDirVol("shm", corev1.StorageMediumMemory, "1Mi")})
	if _, err := env.m.Setup(ctx, pod); err != nil {
		t.Fatal(err)
	}
	dir := env.m.VolumeDir("full", PluginEmptyDir, "shm")
	f, err := os.Create(filepath.Join(dir, "big"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	var written int
	for written = 0; written < 4<<20; written += len(chunk) {
		if _, err = f.Write(chunk); err != nil {
			break
		}
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("writing %d bytes into a 1Mi tmpfs: err = %v, want ENOSPC", written, err)
	}
	if written > 1<<20 {
		t.Errorf("wrote %d bytes into a 1Mi tmpfs", written)
	}
	us, err := env.m.Usage("full", pod)
	if err != nil {
		t.Fatal(err)
	}
	if len(us) != 1 || us[0].Medium != MediumMemory || us[0].Bytes < uint64(written) || us[0].Inodes < 2 {
		t.Errorf("Usage = %+v, want Memory, >= %d bytes, >= 2 inodes", us, written)
	}
	f.Close()
	if err := env.m.Teardown(ctx, "full"); err != nil {
		t.Fatal(err)
	}
}

func TestHostPath(t *testing.T) {
	env := newTestEnv(t)
	ctx := testCtx(t)
	dirPath := filepath.Join(env.allowed, "made/dir")
	filePath := filepath.Join(env.allowed, "made/parent/file")
	pod := newPod("host", []corev1.Volume{
		{Name: "d", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dirPath, Type: ptr(corev1.HostPathDirectoryOrCreate)}}},
		{Name: "f", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: filePath, Type: ptr(corev1.HostPathFileOrCreate)}}},
	}, mountAll(corev1.Container{Name: "app"},
		corev1.VolumeMount{Name: "d", MountPath: "/d", ReadOnly: true},
		corev1.VolumeMount{Name: "f", MountPath: "/f", MountPropagation: ptr(corev1.MountPropagationHostToContainer)}))
	old := unix.Umask(0o077) // the modes must not depend on the agent's umask
	defer unix.Umask(old)
	pv, err := env.m.Setup(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{dirPath: os.ModeDir | 0o755, filePath: 0o644} {
		if fi, err := os.Lstat(p); err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v, %v; want %v", p, fi.Mode(), err, want)
		}
	}
	ms, err := pv.Mounts(&pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	// Handed over as binds of the checked objects beneath the pod.
	holder := filepath.Join(env.m.PodDir("host"), volumesDirName, PluginHostPath)
	if len(ms) != 2 || ms[0].HostPath != filepath.Join(holder, "d") || !ms[0].Readonly || ms[1].HostPath != filepath.Join(holder, "f") ||
		ms[1].Propagation != runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER || ms[1].Readonly {
		t.Fatalf("Mounts = %v", ms)
	}
	assertSameFile(t, ms[0].HostPath, dirPath)
	assertSameFile(t, ms[1].HostPath, filePath)
	if err := env.m.Teardown(ctx, "host"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filePath); err != nil {
		t.Errorf("Teardown touched a hostPath: %v", err)
	}
}

func TestHostPathSymlinkOutOfAllowlistIsRefusedAtSetup(t *testing.T) {
	env := newTestEnv(t)
	ctx := testCtx(t)
	outside := t.TempDir()
	mustSymlink(t, outside, filepath.Join(env.allowed, "link"))
	pod := newPod("hl", []corev1.Volume{{Name: "d", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
		Path: filepath.Join(env.allowed, "link/sub"), Type: ptr(corev1.HostPathDirectoryOrCreate)}}}})
	_, err := env.m.Setup(ctx, pod)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "spec.volumes[0].hostPath.path") {
		t.Fatalf("Setup = %v, want the hostPath refused", err)
	}
	// Even without Validate, the creation itself must not go through.
	err = env.m.checkHostPath(filepath.Join(env.allowed, "link/sub"), corev1.HostPathDirectoryOrCreate, true)
	if !errors.Is(err, ErrUnsafePath) {
		t.Fatalf("checkHostPath = %v, want ErrUnsafePath", err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("a directory was made outside the allowlist: %v", entries)
	}
}

func TestMountsPropagation(t *testing.T) {
	env := newTestEnv(t)
	ctx := testCtx(t)
	bidi := corev1.VolumeMount{Name: "e", MountPath: "/e", MountPropagation: ptr(corev1.MountPropagationBidirectional)}
	pod := newPod("prop", []corev1.Volume{emptyDirVol("e", "", "")},
		mountAll(corev1.Container{Name: "plain"}, bidi),
		mountAll(corev1.Container{Name: "priv", SecurityContext: &corev1.SecurityContext{Privileged: ptr(true)}}, bidi))
	// Validate refuses the pod because of the unprivileged container, so
	// prepare the volumes with the privileged one alone.
	ok := pod.DeepCopy()
	ok.Spec.Containers = ok.Spec.Containers[1:]
	pv, err := env.m.Setup(ctx, ok)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pv.Mounts(&pod.Spec.Containers[0]); !errors.Is(err, ErrPropagation) {
		t.Errorf("Mounts(unprivileged, Bidirectional) = %v, want ErrPropagation", err)
	}
	ms, err := pv.Mounts(&pod.Spec.Containers[1])
	if err != nil || ms[0].Propagation != runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL {
		t.Errorf("Mounts(privileged, Bidirectional) = %v, %v", ms, err)
	}
	unknown := corev1.Container{Name: "x", VolumeMounts: []corev1.VolumeMount{{Name: "nope", MountPath: "/n"}}}
	if _, err := pv.Mounts(&unknown); !errors.Is(err, ErrUnknownVolume) {
		t.Errorf("Mounts(unknown volume) = %v, want ErrUnknownVolume", err)
	}
	if err := env.m.Teardown(ctx, "prop"); err != nil {
		t.Fatal(err)
	}
}
