package mounts

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

func TestValidate(t *testing.T) {
	env := newEnv(t)
	h := env.allowed
	mustMkdir(t, filepath.Join(h, "dir"))
	mustWrite(t, filepath.Join(h, "file"), "x")
	mustSymlink(t, "/etc", filepath.Join(h, "escape"))
	mustSymlink(t, "dir", filepath.Join(h, "inner"))
	l, err := net.Listen("unix", filepath.Join(h, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	devices := os.Geteuid() == 0
	if devices {
		if err := unix.Mknod(filepath.Join(h, "chr"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mknod(filepath.Join(h, "blk"), unix.S_IFBLK|0o600, int(unix.Mkdev(7, 0))); err != nil {
			t.Fatal(err)
		}
	}

	hostPath := func(p string, typ corev1.HostPathType) []corev1.Volume {
		return []corev1.Volume{{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: p, Type: &typ}}}}
	}
	emptyDir := []corev1.Volume{{Name: "e", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	withMount := func(vm corev1.VolumeMount, privileged bool) corev1.Container {
		c := corev1.Container{Name: "app", Image: "busybox", VolumeMounts: []corev1.VolumeMount{vm}}
		if privileged {
			c.SecurityContext = &corev1.SecurityContext{Privileged: ptr(true)}
		}
		return c
	}
	items := func(paths ...string) []corev1.Volume {
		var kp []corev1.KeyToPath
		for _, p := range paths {
			kp = append(kp, corev1.KeyToPath{Key: "k", Path: p})
		}
		return []corev1.Volume{{Name: "c", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}, Items: kp}}}}
	}

	tests := []struct {
		name     string
		pod      *corev1.Pod
		devices  bool
		wantPath string // "" means valid
		wantMsg  string
	}{
		{name: "an allowed directory of type Directory is valid", pod: newPod("u", hostPath(h+"/dir", corev1.HostPathDirectory))},
		{name: "a symlink staying inside the allowed tree is valid", pod: newPod("u", hostPath(h+"/inner", corev1.HostPathDirectory))},
		{name: "a missing DirectoryOrCreate is valid", pod: newPod("u", hostPath(h+"/new/dir", corev1.HostPathDirectoryOrCreate))},
		{name: "a missing path without type is valid", pod: newPod("u", hostPath(h+"/none", corev1.HostPathUnset))},
		{name: "the allowed prefix itself is valid", pod: newPod("u", hostPath(h, corev1.HostPathDirectory))},
		{name: "a socket of type Socket is valid", pod: newPod("u", hostPath(h+"/sock", corev1.HostPathSocket))},
		{name: "a char device of type CharDevice is valid", devices: true, pod: newPod("u", hostPath(h+"/chr", corev1.HostPathCharDev))},
		{name: "a block device of type BlockDevice is valid", devices: true, pod: newPod("u", hostPath(h+"/blk", corev1.HostPathBlockDev))},
		{
			name: "a hostPath outside the allowlist is forbidden", pod: newPod("u", hostPath("/etc", corev1.HostPathDirectory)),
			wantPath: "spec.volumes[0].hostPath.path", wantMsg: "not beneath an allowed prefix",
		},
		{
			name: "a hostPath sharing only a name prefix with the allowlist is forbidden", pod: newPod("u", hostPath(h+"x", corev1.HostPathUnset)),
			wantPath: "spec.volumes[0].hostPath.path", wantMsg: "not beneath an allowed prefix",
		},
		{
			name: "a hostPath through a symlink out of the allowlist is refused", pod: newPod("u", hostPath(h+"/escape", corev1.HostPathDirectory)),
			wantPath: "spec.volumes[0].hostPath.path", wantMsg: "unsafe path",
		},
		{
			name: "an untyped hostPath through a symlink out of the allowlist is refused", pod: newPod("u", hostPath(h+"/escape/passwd", corev1.HostPathUnset)),
			wantPath: "spec.volumes[0].hostPath.path", wantMsg: "unsafe path",
		},
		{
			name: "a hostPath with '..' is refused", pod: newPod("u", hostPath(h+"/dir/../../etc", corev1.HostPathUnset)),
			wantPath: "spec.volumes[0].hostPath.path", wantMsg: "'..'",
		},
		{
			name: "a file is not a Directory", pod: newPod("u", hostPath(h+"/file", corev1.HostPathDirectory)),
			wantPath: "spec.volumes[0].hostPath.type", wantMsg: "is not a directory",
		},
		{
			name: "a directory is not a File", pod: newPod("u", hostPath(h+"/dir", corev1.HostPathFile)),
			wantPath: "spec.volumes[0].hostPath.type", wantMsg: "is not a file",
		},
		{
			name: "a file is not a Socket", pod: newPod("u", hostPath(h+"/file", corev1.HostPathSocket)),
			wantPath: "spec.volumes[0].hostPath.type", wantMsg: "is not a socket",
		},
		{
			name: "a socket is not a CharDevice", pod: newPod("u", hostPath(h+"/sock", corev1.HostPathCharDev)),
			wantPath: "spec.volumes[0].hostPath.type", wantMsg: "is not a character device",
		},
		{
			name: "a char device is not a BlockDevice", devices: true, pod: newPod("u", hostPath(h+"/chr", corev1.HostPathBlockDev)),
			wantPath: "spec.volumes[0].hostPath.type", wantMsg: "is not a block device",
		},
		{
			name: "an existing file is not a DirectoryOrCreate", pod: newPod("u", hostPath(h+"/file", corev1.HostPathDirectoryOrCreate)),
			wantPath: "spec.volumes[0].hostPath.type", wantMsg: "is not a directory",
		},
		{
			name: "an existing directory is not a FileOrCreate", pod: newPod("u", hostPath(h+"/dir", corev1.HostPathFileOrCreate)),
			wantPath: "spec.volumes[0].hostPath.type", wantMsg: "is not a file",
		},
		{
			name: "a missing Directory is refused", pod: newPod("u", hostPath(h+"/missing", corev1.HostPathDirectory)),
			wantPath: "spec.volumes[0].hostPath.type", wantMsg: "does not exist",
		},
		{
			name: "an unknown hostPath type is not supported", pod: newPod("u", hostPath(h+"/dir", "Fifo")),
			wantPath: "spec.volumes[0].hostPath.type", wantMsg: "Unsupported value",
		},
		{
			name:     "a subPath with '..' is refused",
			pod:      newPod("u", emptyDir, withMount(corev1.VolumeMount{Name: "e", MountPath: "/d", SubPath: "a/../../etc"}, false)),
			wantPath: "spec.containers[0].volumeMounts[0].subPath", wantMsg: "'..'",
		},
		{
			name:     "an absolute subPath is refused",
			pod:      newPod("u", emptyDir, withMount(corev1.VolumeMount{Name: "e", MountPath: "/d", SubPath: "/etc"}, false)),
			wantPath: "spec.containers[0].volumeMounts[0].subPath", wantMsg: "relative",
		},
		{
			name:     "a mount of an unknown volume is refused",
			pod:      newPod("u", emptyDir, withMount(corev1.VolumeMount{Name: "nope", MountPath: "/d"}, false)),
			wantPath: "spec.containers[0].volumeMounts[0].name", wantMsg: "Not found",
		},
		{
			name: "Bidirectional propagation without privileged is forbidden",
			pod: newPod("u", emptyDir, withMount(corev1.VolumeMount{Name: "e", MountPath: "/d",
				MountPropagation: ptr(corev1.MountPropagationBidirectional)}, false)),
			wantPath: "spec.containers[0].volumeMounts[0].mountPropagation", wantMsg: "privileged",
		},
		{
			name: "Bidirectional propagation in a privileged container is valid",
			pod: newPod("u", emptyDir, withMount(corev1.VolumeMount{Name: "e", MountPath: "/d",
				MountPropagation: ptr(corev1.MountPropagationBidirectional)}, true)),
		},
		{
			name: "an unknown propagation is not supported",
			pod: newPod("u", emptyDir, withMount(corev1.VolumeMount{Name: "e", MountPath: "/d",
				MountPropagation: ptr(corev1.MountPropagationMode("Shared"))}, false)),
			wantPath: "spec.containers[0].volumeMounts[0].mountPropagation", wantMsg: "Unsupported value",
		},
		{name: "an items path climbing out is refused", pod: newPod("u", items("../../x")), wantPath: "spec.volumes[0].configMap.items[0].path", wantMsg: "'..'"},
		{name: "an absolute items path is refused", pod: newPod("u", items("/etc/x")), wantPath: "spec.volumes[0].configMap.items[0].path", wantMsg: "relative"},
		{name: "an items path on the reserved ..data is refused", pod: newPod("u", items("..data/x")), wantPath: "spec.volumes[0].configMap.items[0].path", wantMsg: "start with '..'"},
		{name: "two items at one path are refused", pod: newPod("u", items("a", "./a")), wantPath: "spec.volumes[0].configMap.items[1].path", wantMsg: "duplicate"},
		{name: "an item inside another item is refused", pod: newPod("u", items("a", "a/b")), wantPath: "spec.volumes[0].configMap.items[1].path", wantMsg: "directory"},
		{
			name:     "a volume name that is no DNS label is refused",
			pod:      newPod("u", []corev1.Volume{{Name: "../x", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}),
			wantPath: "spec.volumes[0].name", wantMsg: "RFC 1123",
		},
		{
			name:     "a volume with no source is not supported",
			pod:      newPod("u", []corev1.Volume{{Name: "x"}}),
			wantPath: "spec.volumes[0]", wantMsg: "Unsupported value",
		},
		{
			name: "a configMap name that is a path is refused",
			pod: newPod("u", []corev1.Volume{{Name: "c", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "../../etc"}}}}}),
			wantPath: "spec.volumes[0].configMap.name", wantMsg: "RFC 1123",
		},
		{name: "a pod uid with a slash is refused", pod: newPod("a/b", nil), wantPath: "metadata.uid", wantMsg: "single path component"},
		{
			name: "a downward API field the node cannot fill is not supported",
			pod: newPod("u", []corev1.Volume{{Name: "d", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
				Items: []corev1.DownwardAPIVolumeFile{{Path: "ip", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.podIP"}}}}}}}),
			wantPath: "spec.volumes[0].downwardAPI.items[0].fieldRef.fieldPath", wantMsg: "Unsupported value",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.devices && !devices {
				cgtest.RequirePrivileged(t)
			}
			errs := env.m.Validate(tt.pod)
			if tt.wantPath == "" {
				if len(errs) > 0 {
					t.Fatalf("Validate = %v, want no errors", errs)
				}
				return
			}
			if len(errs) != 1 {
				t.Fatalf("Validate = %v, want one error at %s", errs, tt.wantPath)
			}
			if errs[0].Field != tt.wantPath || !strings.Contains(errs[0].Error(), tt.wantMsg) {
				t.Fatalf("Validate = %q at %s, want %q at %s", errs[0].Error(), errs[0].Field, tt.wantMsg, tt.wantPath)
			}
		})
	}
}

func TestValidateRefusesEveryHostPathWithoutAllowlist(t *testing.T) {
	env := newEnv(t, func(c *Config) { c.HostPathAllow = nil })
	typ := corev1.HostPathUnset
	pod := newPod("u", []corev1.Volume{{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: env.allowed, Type: &typ}}}})
	errs := env.m.Validate(pod)
	if len(errs) != 1 || errs[0].Field != "spec.volumes[0].hostPath.path" {
		t.Fatalf("Validate = %v, want the hostPath forbidden", errs)
	}
}
