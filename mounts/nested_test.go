package mounts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func mountsPod(containers ...[]corev1.VolumeMount) *corev1.Pod {
	p := &corev1.Pod{}
	for i, vms := range containers {
		c := corev1.Container{Name: "c" + string(rune('0'+i)), VolumeMounts: vms}
		if i == 0 {
			p.Spec.InitContainers = append(p.Spec.InitContainers, c)
			continue
		}
		p.Spec.Containers = append(p.Spec.Containers, c)
	}
	return p
}

func TestNestedMountpoints(t *testing.T) {
	vm := func(name, path string) corev1.VolumeMount { return corev1.VolumeMount{Name: name, MountPath: path} }
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"no mount beneath the volume needs none", mountsPod(nil, []corev1.VolumeMount{vm("cfg", "/etc/app"), vm("data", "/var/lib/app")}), ""},
		{"a mount beneath it needs its directory", mountsPod(nil, []corev1.VolumeMount{vm("data", "/etc/app/data"), vm("cfg", "/etc/app")}), "data"},
		{"a double-nested mount is the nested one's", mountsPod(nil, []corev1.VolumeMount{vm("cfg", "/etc/app"), vm("a", "/etc/app/a"), vm("b", "/etc/app/a/b"), vm("c", "/etc/app/c/d")}), "a c/d"},
		{"a sibling with the same prefix is not beneath", mountsPod(nil, []corev1.VolumeMount{vm("cfg", "/etc/app"), vm("x", "/etc/application")}), ""},
		{"init containers count, paths are cleaned", mountsPod([]corev1.VolumeMount{vm("cfg", "/etc/app/"), vm("x", "/etc/app//x/")}, []corev1.VolumeMount{vm("cfg", "/etc/app"), vm("y", "/etc/app/y")}), "x y"},
		{"grafana's config with its provisioning beneath", mountsPod(nil, []corev1.VolumeMount{
			vm("datasources", "/etc/grafana/provisioning/datasources"), vm("dashboards", "/etc/grafana/provisioning/dashboards"), vm("cfg", "/etc/grafana")}),
			"provisioning/dashboards provisioning/datasources"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := nestedMountpoints("cfg", tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, " ") != tc.want {
				t.Errorf("nested mount points %q, want %q", got, tc.want)
			}
		})
	}
}

func TestMakeNestedMountpoints(t *testing.T) {
	dir := t.TempDir()
	pod := mountsPod(nil, []corev1.VolumeMount{{Name: "cfg", MountPath: "/etc/grafana"}, {Name: "d", MountPath: "/etc/grafana/provisioning/dashboards"}})
	for range 2 { // a second setup finds them made
		if err := makeNestedMountpoints(dir, "cfg", pod); err != nil {
			t.Fatal(err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "provisioning", "dashboards")); err != nil || !fi.IsDir() {
		t.Fatalf("nested mount point: %v, %v", fi, err)
	}
	// A payload file where a mount point must be is an error.
	if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "x", MountPath: "/etc/grafana/file/x"})
	if err := makeNestedMountpoints(dir, "cfg", pod); err == nil || !strings.Contains(err.Error(), "make nested mount point file/x") {
		t.Errorf("a file in the way: %v", err)
	}
}
