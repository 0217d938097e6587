package mounts

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// owner returns the group and mode of p, not following a symlink.
func owner(t *testing.T, p string) (uint32, fs.FileMode) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Gid, fi.Mode()
}

func withFSGroup(pod *corev1.Pod, gid int64, policy corev1.PodFSGroupChangePolicy) *corev1.Pod {
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: &gid}
	if policy != "" {
		pod.Spec.SecurityContext.FSGroupChangePolicy = &policy
	}
	return pod
}

// TestFSGroupOwnsAnEmptyDir: the volume's root and what is in it get the
// group with group read-write (directories setgid and searchable), as the
// kubelet's SetVolumeOwnership; a symlink in it is not followed. Always
// walks the volume again when a new Volumes (a restarted agent) sets it up;
// OnRootMismatch does not while the root is right.
func TestFSGroupOwnsAnEmptyDir(t *testing.T) {
	const gid = 2000
	for _, tt := range []struct {
		policy          corev1.PodFSGroupChangePolicy
		rewalkOnRestart bool
	}{
		{"", true},
		{corev1.FSGroupChangeAlways, true},
		{corev1.FSGroupChangeOnRootMismatch, false},
	} {
		t.Run("policy "+string(tt.policy), func(t *testing.T) {
			env := newTestEnv(t)
			ctx := testCtx(t)
			pod := withFSGroup(newPod("fsg", []corev1.Volume{emptyDirVol("scratch", "", "")}), gid, tt.policy)
			host := filepath.Join(t.TempDir(), "host-file")
			mustWrite(t, host, "not the pod's")
			hostGid, hostMode := owner(t, host)

			if _, err := env.m.Setup(ctx, pod); err != nil {
				t.Fatal(err)
			}
			dir := env.m.VolumeDir("fsg", PluginEmptyDir, "scratch")
			if g, mode := owner(t, dir); g != gid || mode&fs.ModeSetgid == 0 || mode.Perm() != 0o777 {
				t.Errorf("root: group %d mode %v, want %d, setgid, 0777", g, mode, gid)
			}

			// What a container leaves behind, owned by root's group, and a
			// link out of the volume.
			mustWrite(t, filepath.Join(dir, "d/f"), "x")
			if err := os.Chmod(filepath.Join(dir, "d/f"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(host, filepath.Join(dir, "link")); err != nil {
				t.Fatal(err)
			}
			restarted := newEnvAt(t, env)
			if _, err := restarted.m.Setup(ctx, pod); err != nil {
				t.Fatal(err)
			}
			g, mode := owner(t, filepath.Join(dir, "d/f"))
			if walked := g == gid && mode.Perm() == 0o660; walked != tt.rewalkOnRestart {
				t.Errorf("d/f after a restart: group %d mode %v; walked %v, want %v", g, mode, walked, tt.rewalkOnRestart)
			}
			if tt.rewalkOnRestart {
				if g, mode := owner(t, filepath.Join(dir, "d")); g != gid || mode&fs.ModeSetgid == 0 || mode.Perm()&0o770 != 0o770 {
					t.Errorf("d: group %d mode %v, want %d, setgid, g+rwx", g, mode, gid)
				}
				if g, _ := owner(t, filepath.Join(dir, "link")); g != gid {
					t.Errorf("the link's group %d, want %d", g, gid)
				}
			}
			if g, mode := owner(t, host); g != hostGid || mode != hostMode {
				t.Errorf("the host file behind the link changed: group %d mode %v, was %d %v", g, mode, hostGid, hostMode)
			}
			if err := restarted.m.Teardown(ctx, "fsg"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestFSGroupOwnsAConfigMapVolume: an API volume's files get the group
// and group read, its directories setgid, whatever the policy.
func TestFSGroupOwnsAConfigMapVolume(t *testing.T) {
	const gid = 3000
	env := newTestEnv(t)
	ctx := testCtx(t)
	env.writeSource(t, sourceConfigMaps, "default", "cfg", map[string]string{"app.conf": "port=80"})
	pod := withFSGroup(newPod("fsgcm", []corev1.Volume{configMapVol("cfg", "cfg")}), gid, corev1.FSGroupChangeOnRootMismatch)
	if _, err := env.m.Setup(ctx, pod); err != nil {
		t.Fatal(err)
	}
	dir := env.m.VolumeDir("fsgcm", PluginConfigMap, "cfg")
	real, err := filepath.EvalSymlinks(filepath.Join(dir, "app.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if g, mode := owner(t, real); g != gid || mode.Perm() != 0o644 {
		t.Errorf("app.conf: group %d mode %v, want %d 0644", g, mode, gid)
	}
	if g, mode := owner(t, filepath.Dir(real)); g != gid || mode&fs.ModeSetgid == 0 {
		t.Errorf("its generation directory: group %d mode %v, want %d setgid", g, mode, gid)
	}
	if err := env.m.Teardown(ctx, "fsgcm"); err != nil {
		t.Fatal(err)
	}
}

// newEnvAt is a second Volumes on env's directories: the agent restarted.
func newEnvAt(t *testing.T, env *testEnv) *testEnv {
	t.Helper()
	m, err := New(Config{RootDir: env.root, HostPathAllow: []string{env.allowed}, SourceDir: env.source,
		NodeMemory: 64 << 20, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return &testEnv{m: m, root: env.root, allowed: env.allowed, source: env.source}
}
