package mounts

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func hostPathVol(name, p string, typ corev1.HostPathType) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: p, Type: &typ}}}
}

// The runtime resolves the host path of a CRI mount when it creates the
// container, after Setup checked it. A pod that can write in an allowed
// tree swaps the checked object for a symlink to a place outside the
// allowlist in between; what the runtime is handed must still show the
// checked object, never the symlink's target.
func TestHostPathSwappedForASymlinkAfterTheCheckStillShowsTheCheckedObject(t *testing.T) {
	for _, c := range []struct {
		name string
		typ  corev1.HostPathType
		// make makes the checked object at p and its stand-in outside
		// at out; read reads what the host path handed over shows.
		make func(t *testing.T, p, out string)
		read func(t *testing.T, host string) string
	}{{
		name: "a directory",
		typ:  corev1.HostPathDirectory,
		make: func(t *testing.T, p, out string) {
			mustWrite(t, filepath.Join(p, "which"), "original")
			mustWrite(t, filepath.Join(out, "which"), "marker")
		},
		read: func(t *testing.T, host string) string { return mustRead(t, filepath.Join(host, "which")) },
	}, {
		name: "a file",
		typ:  corev1.HostPathFile,
		make: func(t *testing.T, p, out string) {
			mustWrite(t, p, "original")
			mustWrite(t, out, "marker")
		},
		read: mustRead,
	}, {
		name: "a directory of type unset",
		typ:  corev1.HostPathUnset,
		make: func(t *testing.T, p, out string) {
			mustWrite(t, filepath.Join(p, "which"), "original")
			mustWrite(t, filepath.Join(out, "which"), "marker")
		},
		read: func(t *testing.T, host string) string { return mustRead(t, filepath.Join(host, "which")) },
	}} {
		t.Run(c.name+" is still the checked one", func(t *testing.T) {
			env := newTestEnv(t)
			ctx := testCtx(t)
			p := filepath.Join(env.allowed, "d")
			out := filepath.Join(filepath.Dir(env.allowed), "outside")
			c.make(t, p, out)
			pod := newPod("swap", []corev1.Volume{hostPathVol("v", p, c.typ)},
				mountAll(corev1.Container{Name: "app"}, corev1.VolumeMount{Name: "v", MountPath: "/v"}))
			pv, err := env.m.Setup(ctx, pod)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				// t.Context is cancelled before cleanups run.
				if err := env.m.Teardown(context.WithoutCancel(ctx), "swap"); err != nil {
					t.Errorf("Teardown: %v", err)
				}
			})
			ms, err := pv.Mounts(&pod.Spec.Containers[0])
			if err != nil {
				t.Fatal(err)
			}

			// The swap, between the check and the runtime's resolution.
			if err := os.Rename(p, p+".checked"); err != nil {
				t.Fatal(err)
			}
			mustSymlink(t, out, p)

			if got := c.read(t, ms[0].HostPath); got != "original" {
				t.Fatalf("the runtime's host path %s shows %q after the swap, want the checked object's %q", ms[0].HostPath, got, "original")
			}
			// The next sync checks the path again and refuses what it
			// names now; the bind of the checked object stays.
			if _, err := env.m.Setup(ctx, pod); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "hostPath.path") {
				t.Errorf("Setup after the swap = %v, want the hostPath refused", err)
			}
			if got := c.read(t, ms[0].HostPath); got != "original" {
				t.Errorf("after the refused Setup the host path shows %q, want %q", got, "original")
			}
		})
	}
}

// Every hostPath type is handed over as a bind mount of the object checked
// beneath the pod's hostPath holder, of the object's own type, and
// Teardown unmounts them all and leaves the host's objects as they were.
func TestHostPathTypesAreBindMountedBeneathThePod(t *testing.T) {
	env := newTestEnv(t)
	ctx := testCtx(t)
	a := env.allowed
	mustMkdir(t, filepath.Join(a, "dir"))
	mustWrite(t, filepath.Join(a, "file"), "data")
	if err := unix.Mknod(filepath.Join(a, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(a, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })

	cases := []struct {
		name, path string
		typ        corev1.HostPathType
		mode       uint32
	}{
		{"dir", a + "/dir", corev1.HostPathDirectory, unix.S_IFDIR},
		{"file", a + "/file", corev1.HostPathFile, unix.S_IFREG},
		{"null", a + "/null", corev1.HostPathCharDev, unix.S_IFCHR},
		{"sock", a + "/sock", corev1.HostPathSocket, unix.S_IFSOCK},
		{"mkdir", a + "/made/dir", corev1.HostPathDirectoryOrCreate, unix.S_IFDIR},
		{"mkfile", a + "/made/file", corev1.HostPathFileOrCreate, unix.S_IFREG},
		{"unset", a + "/made/unset", corev1.HostPathUnset, unix.S_IFDIR},
		{"allowed", a, corev1.HostPathDirectory, unix.S_IFDIR},
	}
	var vols []corev1.Volume
	var vms []corev1.VolumeMount
	for _, c := range cases {
		vols = append(vols, hostPathVol(c.name, c.path, c.typ))
		vms = append(vms, corev1.VolumeMount{Name: c.name, MountPath: "/" + c.name, ReadOnly: c.name == "dir"})
	}
	pod := newPod("types", vols, mountAll(corev1.Container{Name: "app"}, vms...))
	var ms []*runtimeapi.Mount
	for range 2 { // a second Setup reuses the binds
		pv, err := env.m.Setup(ctx, pod)
		if err != nil {
			t.Fatal(err)
		}
		if ms, err = pv.Mounts(&pod.Spec.Containers[0]); err != nil {
			t.Fatal(err)
		}
	}
	holder := filepath.Join(env.m.PodDir("types"), volumesDirName, PluginHostPath)
	for i, c := range cases {
		typ := string(c.typ)
		if typ == "" {
			typ = "path of type unset"
		}
		t.Run(c.name+" is a bind of the checked "+typ, func(t *testing.T) {
			if want := filepath.Join(holder, c.name); ms[i].HostPath != want {
				t.Errorf("host path %s, want %s", ms[i].HostPath, want)
			}
			if ms[i].Readonly != (c.name == "dir") {
				t.Errorf("read-only %v, want %v", ms[i].Readonly, c.name == "dir")
			}
			var st unix.Stat_t
			if err := unix.Lstat(ms[i].HostPath, &st); err != nil {
				t.Fatal(err)
			}
			if st.Mode&unix.S_IFMT != c.mode {
				t.Errorf("the bind shows mode %o, want type %o", st.Mode, c.mode)
			}
			assertSameFile(t, ms[i].HostPath, c.path)
		})
	}
	if n := len(mountsUnder(t, holder)); n != len(cases)+1 {
		t.Errorf("%d mounts beneath the holder after two Setups, want %d (the holder and one per volume)", n, len(cases)+1)
	}

	if err := env.m.Teardown(ctx, "types"); err != nil {
		t.Fatal(err)
	}
	if left := mountsUnder(t, env.m.PodDir("types")); len(left) != 0 {
		t.Errorf("mounts left after Teardown: %v", left[0].Mountpoint)
	}
	if got := mustRead(t, filepath.Join(a, "file")); got != "data" {
		t.Errorf("the hostPath file after Teardown reads %q", got)
	}
	for _, c := range cases {
		if _, err := os.Lstat(c.path); err != nil {
			t.Errorf("Teardown removed the hostPath %s: %v", c.path, err)
		}
	}
}

// The holder is unbindable, so that the runtime's rbind of a tree holding
// it (a hostPath "/") does not copy the other binds, and the binds keep
// the hostPath's propagation: peers of a shared hostPath, so that mounts
// made on the host beneath it reach them (HostToContainer), and the
// host's mounts beneath it are bound too. Teardown unmounts the copies
// without unmounting the host's mounts they are peers of.
func TestHostPathBindKeepsTheHostsMountsAndTheirPropagation(t *testing.T) {
	env := newTestEnv(t)
	ctx := testCtx(t)
	shared := sharedMount(t, filepath.Join(env.allowed, "shared"))
	before := filepath.Join(shared, "before")
	after := filepath.Join(shared, "after")
	mustMkdir(t, before)
	mustMkdir(t, after)
	tmpfs(t, before, "mounted before")

	pod := newPod("prop", []corev1.Volume{hostPathVol("s", shared, corev1.HostPathDirectory)},
		mountAll(corev1.Container{Name: "app"}, corev1.VolumeMount{Name: "s", MountPath: "/s",
			MountPropagation: ptr(corev1.MountPropagationHostToContainer)}))
	pv, err := env.m.Setup(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := pv.Mounts(&pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	bind := ms[0].HostPath
	if ms[0].Propagation != runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER {
		t.Errorf("propagation %v", ms[0].Propagation)
	}
	holder := filepath.Dir(bind)
	if fields := optionalFields(t, holder); !strings.Contains(fields, "unbindable") {
		t.Errorf("the holder %s has propagation %q, want unbindable", holder, fields)
	}
	if fields := optionalFields(t, bind); !strings.Contains(fields, "shared:") {
		t.Errorf("the bind of a shared hostPath has propagation %q, want shared (the runtime refuses HostToContainer otherwise)", fields)
	}
	if got := mustRead(t, filepath.Join(bind, "before", "f")); got != "mounted before" {
		t.Errorf("the host's mount beneath the hostPath is not in the bind: %q", got)
	}
	tmpfs(t, after, "mounted after")
	if got := mustRead(t, filepath.Join(bind, "after", "f")); got != "mounted after" {
		t.Errorf("a mount made on the host after Setup did not reach the bind: %q", got)
	}

	if err := env.m.Teardown(ctx, "prop"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{before, after} {
		if mounted, err := mountinfo.Mounted(p); err != nil || !mounted {
			t.Errorf("the host's mount %s is gone after Teardown (mounted %v, %v): the unmount of its copy propagated", p, mounted, err)
		}
	}
}

// A hostPath replaced on the host by another directory that is still
// allowed (a node's administrator recreating it) is bound anew at the next
// Setup, as the runtime would resolve the path anew; the old bind is
// unmounted, not stacked.
func TestHostPathReplacedByAnAllowedDirectoryIsBoundAnew(t *testing.T) {
	env := newTestEnv(t)
	ctx := testCtx(t)
	dir := filepath.Join(env.allowed, "d")
	mustWrite(t, filepath.Join(dir, "which"), "first")
	pod := newPod("renew", []corev1.Volume{hostPathVol("d", dir, corev1.HostPathDirectory)},
		mountAll(corev1.Container{Name: "app"}, corev1.VolumeMount{Name: "d", MountPath: "/d"}))
	if _, err := env.m.Setup(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(dir, "which"), "second")
	pv, err := env.m.Setup(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := pv.Mounts(&pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, filepath.Join(ms[0].HostPath, "which")); got != "second" {
		t.Errorf("after the hostPath was replaced the bind shows %q, want %q", got, "second")
	}
	if n := len(mountsUnder(t, env.m.PodDir("renew"))); n != 2 {
		t.Errorf("%d mounts beneath the pod, want 2 (the holder and one bind)", n)
	}
	if err := env.m.Teardown(ctx, "renew"); err != nil {
		t.Fatal(err)
	}
}

// A Volumes started after a crash finds the hostPath binds of a pod it
// does not know and unmounts them, as it does every mount beneath a pod.
func TestHostPathBindsOfAnUnknownPodAreCollected(t *testing.T) {
	env := newTestEnv(t)
	ctx := testCtx(t)
	dir := filepath.Join(env.allowed, "kept")
	mustWrite(t, filepath.Join(dir, "f"), "kept")
	pod := newPod("gone", []corev1.Volume{hostPathVol("d", dir, corev1.HostPathDirectory)})
	if _, err := env.m.Setup(ctx, pod); err != nil {
		t.Fatal(err)
	}
	m2, err := New(Config{RootDir: env.root, HostPathAllow: []string{env.allowed}, NodeMemory: 64 << 20, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if left, err := m2.Leftovers("gone"); err != nil || len(left) != 2 {
		t.Fatalf("Leftovers = %v, %v; want the holder and the bind", left, err)
	}
	removed, err := m2.GC(ctx, map[types.UID]bool{})
	if err != nil || len(removed) != 1 {
		t.Fatalf("GC = %v, %v", removed, err)
	}
	if left := mountsUnder(t, env.m.PodDir("gone")); len(left) != 0 {
		t.Errorf("mounts left after GC: %s", left[0].Mountpoint)
	}
	if got := mustRead(t, filepath.Join(dir, "f")); got != "kept" {
		t.Errorf("the hostPath after GC reads %q", got)
	}
}

// A subPath of a hostPath is bound from inside the hostPath's bind, so it
// is a peer of the host's mount too: a mount made on the host beneath the
// subPath after Setup reaches it. Teardown, and GC by a Volumes started
// after a crash, unmount that copy without unmounting the host's mount.
func TestHostPathSubPathTeardownKeepsTheHostsMountsBeneathIt(t *testing.T) {
	for _, c := range []struct {
		name     string
		teardown func(ctx context.Context, env *testEnv, uid types.UID) error
	}{{
		name: "Teardown",
		teardown: func(ctx context.Context, env *testEnv, uid types.UID) error {
			return env.m.Teardown(ctx, uid)
		},
	}, {
		name: "GC by a Volumes started after a crash",
		teardown: func(ctx context.Context, env *testEnv, uid types.UID) error {
			m2, err := New(Config{RootDir: env.root, HostPathAllow: []string{env.allowed}, NodeMemory: 64 << 20, Logger: testLogger(t)})
			if err != nil {
				return err
			}
			removed, err := m2.GC(ctx, map[types.UID]bool{})
			if err == nil && len(removed) != 1 {
				err = fmt.Errorf("GC removed %v, want %s", removed, uid)
			}
			return err
		},
	}} {
		t.Run(c.name+" leaves the host's mount beneath the subPath", func(t *testing.T) {
			env := newTestEnv(t)
			ctx := testCtx(t)
			shared := sharedMount(t, filepath.Join(env.allowed, "shared"))
			later := filepath.Join(shared, "sub", "later")
			mustMkdir(t, later)
			const uid = "subprop"
			pod := newPod(uid, []corev1.Volume{hostPathVol("s", shared, corev1.HostPathDirectory)},
				mountAll(corev1.Container{Name: "app"}, corev1.VolumeMount{Name: "s", MountPath: "/s", SubPath: "sub"}))
			pv, err := env.m.Setup(ctx, pod)
			if err != nil {
				t.Fatal(err)
			}
			ms, err := pv.Mounts(&pod.Spec.Containers[0])
			if err != nil {
				t.Fatal(err)
			}
			tmpfs(t, later, "mounted after")
			if got := mustRead(t, filepath.Join(ms[0].HostPath, "later", "f")); got != "mounted after" {
				t.Fatalf("a mount made on the host beneath the subPath did not reach its bind %s: %q", ms[0].HostPath, got)
			}

			if err := c.teardown(ctx, env, uid); err != nil {
				t.Fatal(err)
			}
			if mounted, err := mountinfo.Mounted(later); err != nil || !mounted {
				t.Fatalf("the host's mount %s is gone (mounted %v, %v): the unmount of its copy beneath the subPath propagated", later, mounted, err)
			}
			if got := mustRead(t, filepath.Join(later, "f")); got != "mounted after" {
				t.Errorf("the host's mount reads %q", got)
			}
			if left := mountsUnder(t, env.m.PodDir(uid)); len(left) != 0 {
				t.Errorf("mounts left beneath the pod: %s", left[0].Mountpoint)
			}
		})
	}
}

// sharedMount makes dir a bind mount of itself, rshared, as the node's
// root is on a systemd host; unmounted in cleanup.
func sharedMount(t *testing.T, dir string) string {
	t.Helper()
	mustMkdir(t, dir)
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { detachAll(t, dir) })
	if err := unix.Mount("", dir, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		t.Fatal(err)
	}
	return dir
}

// tmpfs mounts a small tmpfs on dir with a file f holding data; unmounted
// in cleanup.
func tmpfs(t *testing.T, dir, data string) {
	t.Helper()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { detachAll(t, dir) })
	mustWrite(t, filepath.Join(dir, "f"), data)
}

// optionalFields is the propagation of the mount at p, as mountinfo's
// optional fields say it ("shared:N", "master:N", "unbindable" or "").
func optionalFields(t *testing.T, p string) string {
	t.Helper()
	infos, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(p))
	if err != nil || len(infos) == 0 {
		t.Fatalf("mountinfo of %s: %v, %d entries", p, err, len(infos))
	}
	return infos[len(infos)-1].Optional
}
