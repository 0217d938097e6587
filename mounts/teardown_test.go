package mounts

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestTeardownIsIdempotentAndLeavesNothing(t *testing.T) {
	env := newTestEnv(t)
	ctx := testCtx(t)
	env.writeSource(t, sourceSecrets, "default", "s", map[string]string{"k": "v"})
	outside := t.TempDir()
	mustWrite(t, filepath.Join(outside, "keep"), "mine")
	pod := newPod("td", []corev1.Volume{
		emptyDirVol("mem", corev1.StorageMediumMemory, "1Mi"),
		emptyDirVol("disk", "", ""),
		{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}},
	}, mountAll(corev1.Container{Name: "app"},
		corev1.VolumeMount{Name: "mem", MountPath: "/m", SubPath: "sub"},
		corev1.VolumeMount{Name: "sec", MountPath: "/k", SubPath: "k"}))
	pv, err := env.m.Setup(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pv.Mounts(&pod.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	// A container's symlinks out of its volume must not lead the removal.
	mustSymlink(t, outside, filepath.Join(env.m.VolumeDir("td", PluginEmptyDir, "disk"), "out"))
	mustSymlink(t, filepath.Join(outside, "keep"), filepath.Join(env.m.VolumeDir("td", PluginEmptyDir, "mem"), "keep"))

	left, err := env.m.Leftovers("td")
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 4 { // two tmpfs, two subPath binds
		t.Fatalf("Leftovers = %v, want 4 mounts", left)
	}
	for range 2 {
		if err := env.m.Teardown(ctx, "td"); err != nil {
			t.Fatal(err)
		}
	}
	if ms := mountsUnder(t, env.root); len(ms) != 0 {
		t.Errorf("mounts after Teardown: %v", ms[0].Mountpoint)
	}
	if left, err := env.m.Leftovers("td"); err != nil || len(left) != 0 {
		t.Errorf("Leftovers after Teardown = %v, %v", left, err)
	}
	if _, err := os.Lstat(env.m.PodDir("td")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pod dir after Teardown: %v", err)
	}
	if got := mustRead(t, filepath.Join(outside, "keep")); got != "mine" {
		t.Errorf("a file outside the pod was changed: %q", got)
	}
	if err := env.m.Teardown(ctx, "never-seen"); err != nil {
		t.Errorf("Teardown(unknown uid) = %v", err)
	}
	if err := env.m.Teardown(ctx, "../escape"); !errors.Is(err, ErrUnsafePath) {
		t.Errorf("Teardown(../escape) = %v, want ErrUnsafePath", err)
	}
}

func TestTeardownRemovesASymlinkedPodDirOnly(t *testing.T) {
	env := newTestEnv(t)
	ctx := testCtx(t)
	outside := t.TempDir()
	mustWrite(t, filepath.Join(outside, "keep"), "mine")
	mustSymlink(t, outside, env.m.PodDir("linked"))
	if err := env.m.Teardown(ctx, "linked"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(env.m.PodDir("linked")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the link remains: %v", err)
	}
	if got := mustRead(t, filepath.Join(outside, "keep")); got != "mine" {
		t.Errorf("the link's target was changed: %q", got)
	}
}

// TestRemoveNeverCrossesAMount checks the last line of defence: the removal
// walk refuses to descend into a mount, so a mount that Teardown could not
// unmount loses nothing.
func TestRemoveNeverCrossesAMount(t *testing.T) {
	env := newTestEnv(t)
	ctx := testCtx(t)
	dir := filepath.Join(env.root, "walk")
	mustMkdir(t, filepath.Join(dir, "a/mnt"))
	mustWrite(t, filepath.Join(dir, "a/file"), "x")
	if err := unix.Mount("tmpfs", filepath.Join(dir, "a/mnt"), "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(filepath.Join(dir, "a/mnt"), unix.MNT_DETACH) })
	mustWrite(t, filepath.Join(dir, "a/mnt/precious"), "data")

	parent, err := unix.Open(env.root, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(parent)
	var st unix.Statx_t
	if err := unix.Statx(parent, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &st); err != nil {
		t.Fatal(err)
	}
	err = removeBeneath(ctx, parent, "walk", st.Mnt_id, dir)
	if !errors.Is(err, ErrMountsRemain) {
		t.Fatalf("removeBeneath = %v, want ErrMountsRemain", err)
	}
	if got := mustRead(t, filepath.Join(dir, "a/mnt/precious")); got != "data" {
		t.Errorf("the mount's content was touched: %q", got)
	}
}

func TestGC(t *testing.T) {
	env := newTestEnv(t)
	ctx := testCtx(t)
	for _, uid := range []string{"a", "b", "c"} {
		if _, err := env.m.Setup(ctx, newPod(uid, []corev1.Volume{emptyDirVol("m", corev1.StorageMediumMemory, "1Mi")})); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := env.m.GC(ctx, map[types.UID]bool{"b": true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []types.UID{"a", "c"}) {
		t.Errorf("GC removed %v, want [a c]", removed)
	}
	dirs, err := env.m.PodDirs()
	if err != nil || !slices.Equal(dirs, []types.UID{"b"}) {
		t.Errorf("PodDirs = %v, %v; want [b]", dirs, err)
	}
	if left, _ := env.m.Leftovers("b"); len(left) != 1 {
		t.Errorf("the live pod lost its tmpfs: %v", left)
	}
	if removed, err := env.m.GC(ctx, nil); err != nil || !slices.Equal(removed, []types.UID{"b"}) {
		t.Errorf("GC(nothing live) = %v, %v", removed, err)
	}
	if ms := mountsUnder(t, env.root); len(ms) != 0 {
		t.Errorf("mounts after GC: %v", ms[0].Mountpoint)
	}
}
