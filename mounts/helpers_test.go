package mounts

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

// testTimeout bounds every test that touches the file system or mounts.
const testTimeout = 60 * time.Second

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// testEnv is a Volumes on a fresh root, with an allowed hostPath tree and
// a source directory.
type testEnv struct {
	m       *Volumes
	root    string // RootDir, resolved
	allowed string // the only HostPathAllow entry, resolved
	source  string // SourceDir
}

// newTestEnv needs root (it mounts). Every mount left beneath the test's
// directories is detached in cleanup, before the directories are removed.
func newTestEnv(t *testing.T, mutate ...func(*Config)) *testEnv {
	t.Helper()
	cgtest.RequirePrivileged(t)
	return newEnv(t, mutate...)
}

// newEnv is newTestEnv for tests that do not mount.
func newEnv(t *testing.T, mutate ...func(*Config)) *testEnv {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		t.Cleanup(func() { detachAll(t, base) })
	}
	env := &testEnv{
		root:    filepath.Join(base, "root"),
		allowed: filepath.Join(base, "host"),
		source:  filepath.Join(base, "source"),
	}
	mustMkdir(t, env.allowed)
	mustMkdir(t, env.source)
	cfg := Config{
		RootDir:       env.root,
		HostPathAllow: []string{env.allowed},
		SourceDir:     env.source,
		NodeMemory:    64 << 20,
		Logger:        testLogger(t),
	}
	for _, f := range mutate {
		f(&cfg)
	}
	env.m, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// detachAll lazily unmounts every mount beneath dir, deepest first: the
// safety net that keeps a failing test from leaking mounts.
func detachAll(t *testing.T, dir string) {
	infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	slices.Reverse(infos)
	slices.SortStableFunc(infos, func(a, b *mountinfo.Info) int {
		return strings.Count(b.Mountpoint, "/") - strings.Count(a.Mountpoint, "/")
	})
	for _, mi := range infos {
		if err := unix.Unmount(mi.Mountpoint, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil {
			t.Errorf("cleanup: unmount %s: %v", mi.Mountpoint, err)
		}
	}
}

func (e *testEnv) writeSource(t *testing.T, kind, ns, name string, data map[string]string) {
	t.Helper()
	dir := filepath.Join(e.source, kind, ns, name)
	mustMkdir(t, dir)
	for k, v := range data {
		mustWrite(t, filepath.Join(dir, k), v)
	}
}

func newPod(uid string, volumes []corev1.Volume, containers ...corev1.Container) *corev1.Pod {
	if len(containers) == 0 {
		containers = []corev1.Container{{Name: "app", Image: "busybox"}}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p-" + uid, Namespace: "default", UID: types.UID(uid),
			Labels: map[string]string{"app": "web", "tier": "a\"b"}},
		Spec: corev1.PodSpec{Volumes: volumes, Containers: containers},
	}
}

func mountAll(c corev1.Container, mounts ...corev1.VolumeMount) corev1.Container {
	c.VolumeMounts = mounts
	return c
}

func ptr[T any](v T) *T { return &v }

func quantity(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

func mustMkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, p, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// mountsUnder lists the mount points beneath dir in /proc/self/mountinfo.
func mountsUnder(t *testing.T, dir string) []*mountinfo.Info {
	t.Helper()
	infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		t.Fatal(err)
	}
	return infos
}
