package mounts

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

func TestSubPath(t *testing.T) {
	env := newTestEnv(t)
	ctx := testCtx(t)
	env.writeSource(t, sourceConfigMaps, "default", "cfg", map[string]string{"app.conf": "port=80"})
	mustMkdir(t, filepath.Join(env.allowed, "tree/data"))
	mustSymlink(t, "/etc", filepath.Join(env.allowed, "tree/out"))
	c := mountAll(corev1.Container{Name: "app"},
		corev1.VolumeMount{Name: "scratch", MountPath: "/logs", SubPath: "logs/app"},
		corev1.VolumeMount{Name: "scratch", MountPath: "/one", SubPath: "files/one"},
		corev1.VolumeMount{Name: "scratch", MountPath: "/alias", SubPath: "alias"},
		corev1.VolumeMount{Name: "cfg", MountPath: "/etc/app.conf", SubPath: "app.conf"},
		corev1.VolumeMount{Name: "tree", MountPath: "/data", SubPath: "data"},
	)
	pod := newPod("sub", []corev1.Volume{
		emptyDirVol("scratch", "", ""),
		configMapVol("cfg", "cfg"),
		{Name: "tree", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
			Path: filepath.Join(env.allowed, "tree"), Type: ptr(corev1.HostPathDirectory)}}},
	}, c)
	pv, err := env.m.Setup(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	vol := env.m.VolumeDir("sub", PluginEmptyDir, "scratch")
	mustWrite(t, filepath.Join(vol, "files/one"), "1")
	mustMkdir(t, filepath.Join(vol, "target"))
	mustSymlink(t, "target", filepath.Join(vol, "alias"))

	ms, err := pv.Mounts(&pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		want := filepath.Join(env.m.PodDir("sub"), volumeSubpathsDir, c.VolumeMounts[i].Name, "app", string(rune('0'+i)))
		if m.HostPath != want {
			t.Errorf("mount %d host path = %s, want %s", i, m.HostPath, want)
		}
	}
	// The subPath that did not exist was made in the volume, and the
	// bind mount shows it.
	mustWrite(t, filepath.Join(ms[0].HostPath, "x.log"), "hello")
	if got := mustRead(t, filepath.Join(vol, "logs/app/x.log")); got != "hello" {
		t.Errorf("write through the subPath mount reads %q in the volume", got)
	}
	if got := mustRead(t, ms[1].HostPath); got != "1" {
		t.Errorf("file subPath reads %q", got)
	}
	assertSameFile(t, ms[2].HostPath, filepath.Join(vol, "target"))
	if got := mustRead(t, ms[3].HostPath); got != "port=80" || !ms[3].Readonly {
		t.Errorf("configMap key subPath reads %q (read-only %v)", got, ms[3].Readonly)
	}
	assertSameFile(t, ms[4].HostPath, filepath.Join(env.allowed, "tree/data"))
	// Five subPath binds, and the hostPath's bind and its holder.
	if n := len(mountsUnder(t, env.m.PodDir("sub"))); n != 7 {
		t.Errorf("%d mounts beneath the pod, want 7", n)
	}
	// Mounts again (a container restart) reuses the bind mounts.
	if _, err := pv.Mounts(&pod.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	if n := len(mountsUnder(t, env.m.PodDir("sub"))); n != 7 {
		t.Errorf("%d mounts beneath the pod after a second Mounts, want 7", n)
	}
	// The subPath directory replaced by a symlink to /etc: the next Mounts
	// refuses it instead of mounting /etc.
	if err := os.Rename(filepath.Join(vol, "target"), filepath.Join(vol, "moved")); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(vol, "alias"))
	mustSymlink(t, "/etc", filepath.Join(vol, "alias"))
	if _, err := pv.Mounts(&pod.Spec.Containers[0]); !errors.Is(err, ErrUnsafePath) {
		t.Errorf("Mounts after the swap = %v, want ErrUnsafePath", err)
	}
	assertNoMountOf(t, env.root, "/etc")

	if err := env.m.Teardown(ctx, "sub"); err != nil {
		t.Fatal(err)
	}
	if ms := mountsUnder(t, env.root); len(ms) != 0 {
		t.Errorf("mounts after Teardown: %v", ms[0].Mountpoint)
	}
	if _, err := os.Stat(filepath.Join(env.allowed, "tree/data")); err != nil {
		t.Errorf("Teardown touched the hostPath: %v", err)
	}
}

// TestSubPathSymlinkEscapeIsRefused plants symlinks to /etc in an emptyDir,
// as a container could, and checks that no subPath mount exposes /etc.
func TestSubPathSymlinkEscapeIsRefused(t *testing.T) {
	env := newTestEnv(t)
	ctx := testCtx(t)
	mustMkdir(t, filepath.Join(env.allowed, "tree"))
	mustSymlink(t, "/etc", filepath.Join(env.allowed, "tree/out"))
	pod := newPod("esc", []corev1.Volume{
		emptyDirVol("scratch", "", ""),
		{Name: "tree", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
			Path: filepath.Join(env.allowed, "tree"), Type: ptr(corev1.HostPathDirectory)}}},
	})
	pv, err := env.m.Setup(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	vol := env.m.VolumeDir("esc", PluginEmptyDir, "scratch")
	mustSymlink(t, "/etc", filepath.Join(vol, "abs"))
	mustSymlink(t, "../../../../../../../../../../etc", filepath.Join(vol, "rel"))
	mustMkdir(t, filepath.Join(vol, "d"))
	mustSymlink(t, "../abs", filepath.Join(vol, "d/chain"))
	mustSymlink(t, "/proc/self/root/etc", filepath.Join(vol, "magic"))

	for _, tt := range []struct{ volume, subPath string }{
		{"scratch", "abs"},
		{"scratch", "abs/passwd"},
		{"scratch", "rel"},
		{"scratch", "d/chain"},
		{"scratch", "magic"},
		{"tree", "out"},
		{"tree", "out/passwd"},
	} {
		t.Run(tt.volume+" "+tt.subPath, func(t *testing.T) {
			c := mountAll(corev1.Container{Name: "app"}, corev1.VolumeMount{Name: tt.volume, MountPath: "/x", SubPath: tt.subPath})
			ms, err := pv.Mounts(&c)
			if !errors.Is(err, ErrUnsafePath) {
				t.Fatalf("Mounts(subPath %q) = %v, %v; want ErrUnsafePath", tt.subPath, ms, err)
			}
			if !strings.Contains(err.Error(), tt.volume) {
				t.Errorf("error %q does not name the volume", err)
			}
		})
	}
	assertNoMountOf(t, env.root, "/etc")
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Fatalf("the host's /etc was harmed: %v", err)
	}
	if err := env.m.Teardown(ctx, "esc"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Fatalf("Teardown followed a symlink into /etc: %v", err)
	}
}

func TestSubPathMissingInConfigMapIsAnError(t *testing.T) {
	env := newTestEnv(t)
	ctx := testCtx(t)
	env.writeSource(t, sourceConfigMaps, "default", "cfg", map[string]string{"a": "1"})
	pod := newPod("cmsub", []corev1.Volume{configMapVol("cfg", "cfg")},
		mountAll(corev1.Container{Name: "app"}, corev1.VolumeMount{Name: "cfg", MountPath: "/b", SubPath: "b"}))
	pv, err := env.m.Setup(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pv.Mounts(&pod.Spec.Containers[0]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Mounts(missing key) = %v, want ErrNotExist", err)
	}
	if _, err := os.Lstat(filepath.Join(env.m.VolumeDir("cmsub", PluginConfigMap, "cfg"), "b")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a directory was made in a configMap volume: %v", err)
	}
	if err := env.m.Teardown(ctx, "cmsub"); err != nil {
		t.Fatal(err)
	}
}

func assertSameFile(t *testing.T, a, b string) {
	t.Helper()
	var sa, sb unix.Stat_t
	if err := unix.Stat(a, &sa); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(b, &sb); err != nil {
		t.Fatal(err)
	}
	if !sameFile(&sa, &sb) {
		t.Errorf("%s and %s are different objects", a, b)
	}
}

// assertNoMountOf fails if a mount beneath dir shows the host directory
// hostDir.
func assertNoMountOf(t *testing.T, dir, hostDir string) {
	t.Helper()
	var host unix.Stat_t
	if err := unix.Stat(hostDir, &host); err != nil {
		t.Fatal(err)
	}
	for _, mi := range mountsUnder(t, dir) {
		var st unix.Stat_t
		if err := unix.Stat(mi.Mountpoint, &st); err == nil && sameFile(&st, &host) {
			t.Errorf("%s is mounted at %s", hostDir, mi.Mountpoint)
		}
	}
}
