package mounts

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/mount-utils"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

// fakeNFS is mount-utils' FakeMounter (which records mounts without
// making them) with a force unmount, and hooks that hold a call until the
// test releases it, as a server that does not answer holds mount(8).
type fakeNFS struct {
	*mount.FakeMounter
	mu         sync.Mutex
	mountHook  func(source, target string) error
	unmountErr func(target string) error
	unmounts   []string
}

func newFakeNFS() *fakeNFS { return &fakeNFS{FakeMounter: mount.NewFakeMounter(nil)} }

func (f *fakeNFS) Mount(source, target, fstype string, options []string) error {
	f.mu.Lock()
	hook := f.mountHook
	f.mu.Unlock()
	if hook != nil {
		if err := hook(source, target); err != nil {
			return err
		}
	}
	return f.FakeMounter.Mount(source, target, fstype, options)
}

func (f *fakeNFS) UnmountWithForce(target string, _ time.Duration) error {
	f.mu.Lock()
	f.unmounts = append(f.unmounts, target)
	hook := f.unmountErr
	f.mu.Unlock()
	if hook != nil {
		return hook(target)
	}
	return f.FakeMounter.Unmount(target)
}

func (f *fakeNFS) unmountCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.unmounts)
}

func nfsVol(name, server, path string, ro bool) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: server, Path: path, ReadOnly: ro}}}
}

func TestNFSSourceAndOptionsAreTheKubeletPlugins(t *testing.T) {
	for _, tc := range []struct {
		name    string
		src     corev1.NFSVolumeSource
		pvOpts  []string
		source  string
		options []string
	}{
		{"a host name and a path give server:path and a single mount attempt", corev1.NFSVolumeSource{Server: "nfs.example", Path: "/exports/a"}, nil, "nfs.example:/exports/a", []string{"retry=0"}},
		{"an IPv4 address is used as it is", corev1.NFSVolumeSource{Server: "10.0.0.2", Path: "/"}, nil, "10.0.0.2:/", []string{"retry=0"}},
		{"an IPv6 address goes in brackets", corev1.NFSVolumeSource{Server: "fd00::2", Path: "/x"}, nil, "[fd00::2]:/x", []string{"retry=0"}},
		{"readOnly adds ro", corev1.NFSVolumeSource{Server: "s", Path: "/x", ReadOnly: true}, nil, "s:/x", []string{"ro", "retry=0"}},
		{"a PersistentVolume's mountOptions come first, once each", corev1.NFSVolumeSource{Server: "s", Path: "/x", ReadOnly: true},
			[]string{"nfsvers=4.1", "hard", "nfsvers=4.1", "ro"}, "s:/x", []string{"nfsvers=4.1", "hard", "ro", "retry=0"}},
		{"a PersistentVolume's own retry= is kept", corev1.NFSVolumeSource{Server: "s", Path: "/x"},
			[]string{"retry=2"}, "s:/x", []string{"retry=2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := nfsSource(&tc.src); got != tc.source {
				t.Errorf("source %q, want %q", got, tc.source)
			}
			if got := nfsOptions(&tc.src, tc.pvOpts); !slices.Equal(got, tc.options) {
				t.Errorf("options %q, want %q", got, tc.options)
			}
		})
	}
}

func TestValidateNFSNamesTheField(t *testing.T) {
	env := newEnv(t, func(c *Config) { c.NFSMounter = newFakeNFS() })
	for _, tc := range []struct {
		name string
		vol  corev1.Volume
		want string // "" accepts
	}{
		{"a server and an absolute path are accepted", nfsVol("v", "nfs.example", "/exports", false), ""},
		{"an IPv6 server is accepted", nfsVol("v", "fd00::1", "/exports", true), ""},
		{"a missing server is refused", nfsVol("v", "", "/exports", false), "spec.volumes[0].nfs.server: Required value"},
		{"a server with a path in it is refused", nfsVol("v", "nfs.example:/a", "/exports", false), "spec.volumes[0].nfs.server: Invalid value"},
		{"a server with a comma is refused (it would add mount options)", nfsVol("v", "a,vers=3", "/exports", false), "spec.volumes[0].nfs.server: Invalid value"},
		{"a missing path is refused", nfsVol("v", "s", "", false), "spec.volumes[0].nfs.path: Required value"},
		{"a relative path is refused", nfsVol("v", "s", "exports", false), "spec.volumes[0].nfs.path: Invalid value: \"exports\": must be an absolute path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := env.m.Validate(newPod("v1", []corev1.Volume{tc.vol}))
			got := errs.ToAggregate()
			switch {
			case tc.want == "" && got != nil:
				t.Fatalf("refused: %v", got)
			case tc.want != "" && (got == nil || !strings.Contains(got.Error(), tc.want)):
				t.Fatalf("errors %v, want one with %q", got, tc.want)
			}
		})
	}
}

func TestNFSSetupMountsTheExportAtTheKubeletsPath(t *testing.T) {
	fake := newFakeNFS()
	env := newEnv(t, func(c *Config) { c.NFSMounter = fake })
	pod := newPod("nfs-1", []corev1.Volume{nfsVol("data", "10.0.0.2", "/exports/a", false), nfsVol("ro", "10.0.0.2", "/exports/b", true)},
		mountAll(corev1.Container{Name: "app"},
			corev1.VolumeMount{Name: "data", MountPath: "/data"},
			corev1.VolumeMount{Name: "ro", MountPath: "/ro"}))
	pv, err := env.m.Setup(testCtx(t), pod)
	if err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(env.root, "pods", "nfs-1", "volumes", "kubernetes.io~nfs", "data")
	roDir := filepath.Join(env.root, "pods", "nfs-1", "volumes", "kubernetes.io~nfs", "ro")
	want := []mount.FakeAction{
		{Action: mount.FakeActionMount, Target: dataDir, Source: "10.0.0.2:/exports/a", FSType: "nfs"},
		{Action: mount.FakeActionMount, Target: roDir, Source: "10.0.0.2:/exports/b", FSType: "nfs"},
	}
	if got := fake.GetLog(); !slices.Equal(got, want) {
		t.Errorf("mounts %+v, want %+v", got, want)
	}
	for _, mp := range fake.MountPoints {
		if mp.Path == roDir && !slices.Equal(mp.Opts, []string{"ro", "retry=0"}) {
			t.Errorf("read-only export mounted with %q, want ro,retry=0", mp.Opts)
		}
		if mp.Path == dataDir && !slices.Equal(mp.Opts, []string{"retry=0"}) {
			t.Errorf("writable export mounted with %q, want retry=0 alone", mp.Opts)
		}
	}
	st, err := os.Lstat(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if !st.IsDir() || st.Mode().Perm() != nfsDirMode&^umask() {
		t.Errorf("volume directory %s is %v, want a %o directory", dataDir, st.Mode(), nfsDirMode)
	}
	ms, err := pv.Mounts(&pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].HostPath != dataDir || ms[0].Readonly || ms[1].HostPath != roDir || !ms[1].Readonly {
		t.Errorf("CRI mounts %v, want %s writable and %s read-only", ms, dataDir, roDir)
	}
}

func umask() os.FileMode {
	m := unix.Umask(0)
	unix.Umask(m)
	return os.FileMode(m)
}

func TestNFSMountThatDoesNotReturnHoldsNoWorker(t *testing.T) {
	fake := newFakeNFS()
	release := make(chan struct{})
	returned := make(chan struct{}, 8)
	var n atomic.Int32
	fake.mountHook = func(string, string) error {
		n.Add(1)
		defer func() { returned <- struct{}{} }()
		<-release
		return errors.New("mount.nfs: Connection timed out")
	}
	env := newEnv(t, func(c *Config) { c.NFSMounter = fake; c.NFSMountTimeout = 50 * time.Millisecond })
	pod := newPod("hung", []corev1.Volume{nfsVol("data", "10.0.0.2", "/exports", false)})
	ctx := testCtx(t)

	_, err := env.m.Setup(ctx, pod)
	if !errors.Is(err, ErrMountInProgress) {
		t.Fatalf("Setup with a server that does not answer: %v, want ErrMountInProgress", err)
	}
	var ve *VolumeError
	if !errors.As(err, &ve) || ve.Volume != "data" || ve.Op != "mount" {
		t.Errorf("error %v does not name the volume and the operation", err)
	}
	t.Run("a second sync starts no second mount", func(t *testing.T) {
		if _, err := env.m.Setup(ctx, pod); !errors.Is(err, ErrMountInProgress) {
			t.Fatalf("second Setup: %v, want ErrMountInProgress", err)
		}
		if got := n.Load(); got != 1 {
			t.Errorf("%d mount calls, want 1", got)
		}
	})
	t.Run("teardown keeps the directory a late mount would land on", func(t *testing.T) {
		err := env.m.Teardown(ctx, "hung")
		if !errors.Is(err, ErrMountsRemain) || !errors.Is(err, ErrMountInProgress) {
			t.Fatalf("Teardown while mounting: %v, want ErrMountsRemain and ErrMountInProgress", err)
		}
		if _, err := os.Lstat(env.m.VolumeDir("hung", PluginNFS, "data")); err != nil {
			t.Errorf("volume directory removed while its mount runs: %v", err)
		}
	})
	close(release)
	<-returned
	t.Run("once mount(8) gave up, the next sync reports its error", func(t *testing.T) {
		_, err := env.m.Setup(ctx, pod)
		if err == nil || errors.Is(err, ErrMountInProgress) || !strings.Contains(err.Error(), "Connection timed out") {
			t.Fatalf("Setup after the mount returned: %v, want mount.nfs's error", err)
		}
	})
	t.Run("and teardown removes the pod directory", func(t *testing.T) {
		// The last Setup mounted again and failed at once (the hook
		// no longer blocks); nothing is in flight.
		if err := env.m.Teardown(ctx, "hung"); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(env.m.PodDir("hung")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("pod directory after Teardown: %v", err)
		}
	})
}

func TestNFSUnmountThatDoesNotReturnIsDetached(t *testing.T) {
	hung := make(chan struct{}) // released when the test ends
	t.Cleanup(func() { close(hung) })
	for _, tc := range []struct {
		name         string
		unmount      func(string) error
		wantDetached bool
		wantErr      error
	}{
		{"an answering server is unmounted", nil, false, nil},
		{"a hung umount is detached", func(string) error { <-hung; return nil }, true, nil},
		{"a failed umount of a mount that stays is an error", func(string) error { return errors.New("umount: target is busy") }, false, ErrMountsRemain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := newFakeNFS()
			fake.unmountErr = tc.unmount
			c, err := newNFSClient(Config{NFSMounter: fake, NFSUnmountTimeout: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			// A real mount point, so that "still mounted" is true after
			// a failed unmount: the test's own tmpfs when root, else /.
			p := "/"
			if os.Geteuid() == 0 {
				p = t.TempDir()
				if err := unix.Mount("tmpfs", p, "tmpfs", 0, "size=1m"); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { detachAll(t, p) })
			}
			var detached []string
			c.detach = func(p string) error { detached = append(detached, p); return nil }
			got, err := c.unmount(p)
			if got != tc.wantDetached || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("unmount: detached %v, %v; want detached %v, %v", got, err, tc.wantDetached, tc.wantErr)
			}
			if tc.wantDetached != (len(detached) == 1) {
				t.Errorf("detached %q", detached)
			}
			if tc.wantDetached {
				// Teardown again while that umount still runs: detached
				// at once, no second umount.
				if got, err := c.unmount(p); !got || err != nil {
					t.Errorf("second unmount: detached %v, %v", got, err)
				}
				if n := fake.unmountCalls(); n != 1 {
					t.Errorf("umount ran %d times, want once", n)
				}
			}
		})
	}
}

// TestNFSMountRunsInTheNodeNetNS checks that mount(8) runs in
// Config.NodeNetNS, where the NFS client's socket must be made: the fake
// mounter execs readlink /proc/self/ns/net as mount(8) would be exec'd.
func TestNFSMountRunsInTheNodeNetNS(t *testing.T) {
	cgtest.RequirePrivileged(t)
	nsPath := newTestNetNS(t)
	var st unix.Stat_t
	if err := unix.Stat(nsPath, &st); err != nil {
		t.Fatal(err)
	}
	want := "net:[" + strconv.FormatUint(st.Ino, 10) + "]"
	own, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	if own == want {
		t.Fatalf("the test's namespace %s is the agent's own", want)
	}
	fake := newFakeNFS()
	var got string
	fake.mountHook = func(string, string) error {
		out, err := exec.Command("readlink", "/proc/self/ns/net").Output()
		got = strings.TrimSpace(string(out))
		return err
	}
	env := newEnv(t, func(c *Config) { c.NFSMounter = fake; c.NodeNetNS = nsPath })
	if _, err := env.m.Setup(testCtx(t), newPod("netns", []corev1.Volume{nfsVol("data", "10.0.0.2", "/exports", false)})); err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("mount(8) ran in %s, want the node's %s (the agent's is %s)", got, want, own)
	}
	if self, _ := os.Readlink("/proc/thread-self/ns/net"); self != own {
		t.Errorf("the calling thread stayed in %s", self)
	}
}

// newTestNetNS makes a network namespace of the test's own, kept by
// unshare(1) on a file beneath the test's temporary directory (unmounted
// in cleanup). A child makes it, so that no thread of the test binary
// (the main one can be wedged by a locked goroutine) ever leaves the
// agent's namespace.
func newTestNetNS(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "net")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if out, err := exec.CommandContext(ctx, "unshare", "--net="+p, "true").CombinedOutput(); err != nil {
		t.Fatalf("unshare --net=%s: %v %s", p, err, out)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", p, err)
		}
	})
	return p
}

func TestNFSPersistentVolumeMountsWithItsMountOptions(t *testing.T) {
	fake := newFakeNFS()
	c, err := newNFSClient(Config{NFSMounter: fake})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pv := &corev1.PersistentVolume{}
	pv.Name = "pv-nfs"
	pv.Spec.MountOptions = []string{"nfsvers=4.1", "hard"}
	pv.Spec.NFS = &corev1.NFSVolumeSource{Server: "10.0.0.2", Path: "/exports/pv"}
	if c.Plugin() != "kubernetes.io~nfs" {
		t.Errorf("plugin directory %q", c.Plugin())
	}
	if err := c.mountPV(dir, pv, true); err != nil {
		t.Fatal(err)
	}
	if len(fake.MountPoints) != 1 || fake.MountPoints[0].Device != "10.0.0.2:/exports/pv" || fake.MountPoints[0].Path != dir ||
		!slices.Equal(fake.MountPoints[0].Opts, []string{"nfsvers=4.1", "hard", "ro", "retry=0"}) {
		t.Errorf("mounted %+v, want 10.0.0.2:/exports/pv on %s with nfsvers=4.1,hard,ro,retry=0 (a read-only claim)", fake.MountPoints, dir)
	}
	if pv.Spec.NFS.ReadOnly {
		t.Error("the claim's readOnly was written into the PersistentVolume")
	}
	t.Run("a volume without a path is refused with its field", func(t *testing.T) {
		bad := pv.DeepCopy()
		bad.Spec.NFS.Path = ""
		if err := c.mountPV(dir, bad, false); err == nil || !strings.Contains(err.Error(), "spec.nfs.path: Required value") {
			t.Errorf("mountPV: %v", err)
		}
	})
}

func TestNFSDetachThatDoesNotReturnIsReported(t *testing.T) {
	cgtest.RequirePrivileged(t) // a real mount point that stays mounted
	hung := make(chan struct{})
	t.Cleanup(func() { close(hung) })
	fake := newFakeNFS()
	fake.unmountErr = func(string) error { <-hung; return nil }
	c, err := newNFSClient(Config{NFSMounter: fake, NFSUnmountTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c.detach = func(string) error { <-hung; return nil }
	p := t.TempDir()
	if err := unix.Mount("tmpfs", p, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { detachAll(t, p) })
	detached, err := c.unmount(p)
	if !detached || !errors.Is(err, ErrMountsRemain) || !strings.Contains(err.Error(), "no answer") {
		t.Fatalf("unmount with umount, umount -f and the detach all hung: detached %v, %v; want ErrMountsRemain saying so", detached, err)
	}
}
func TestNFSPersistentVolumeOfAClaimIsMountedAtTheKubeletsPath(t *testing.T) {
	fake := newFakeNFS()
	env := newEnv(t, func(c *Config) { c.NFSMounter = fake })
	env.writeClaim(t, "data", testClaim)
	env.writePV(t, "nfs1", strings.NewReplacer("name: disk1", "name: nfs1", "local: {path: PATH}",
		"nfs: {server: 10.0.0.2, path: /exports/pv}\n  mountOptions: [nfsvers=4.2]").Replace(testPV))
	pod := newPod("pvnfs", []corev1.Volume{claimVol("data", "data", true)},
		mountAll(corev1.Container{Name: "app"}, corev1.VolumeMount{Name: "data", MountPath: "/data"}))
	pv, err := env.m.Setup(testCtx(t), pod)
	if err != nil {
		t.Fatal(err)
	}
	dir := env.m.VolumeDir("pvnfs", PluginNFS, "nfs1")
	if len(fake.MountPoints) != 1 || fake.MountPoints[0].Path != dir || fake.MountPoints[0].Device != "10.0.0.2:/exports/pv" ||
		!slices.Equal(fake.MountPoints[0].Opts, []string{"nfsvers=4.2", "ro", "retry=0"}) {
		t.Errorf("mounted %+v, want 10.0.0.2:/exports/pv on %s with nfsvers=4.2,ro,retry=0", fake.MountPoints, dir)
	}
	ms, err := pv.Mounts(&pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].HostPath != dir || !ms[0].Readonly {
		t.Errorf("CRI mounts %v, want %s read-only", ms, dir)
	}
}
