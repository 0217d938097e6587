package mounts

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// nestedMountpoints are the directories, relative to the volume, that the
// mounts beneath volume name's mount points need, as the kubelet's
// getNestedMountpoints: for a container that mounts the volume at /dir and
// others at /dir/a and /dir/a/b, only "a" (b is a's to provide). The
// runtime cannot make them in the container: configMap, secret,
// downwardAPI and projected volumes are mounted read-only.
func nestedMountpoints(name string, pod *corev1.Pod) ([]string, error) {
	var dirs []string
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			var all, mine []string
			for _, vm := range c.VolumeMounts {
				p := filepath.Clean(vm.MountPath)
				all = append(all, p)
				if vm.Name == name {
					mine = append(mine, p)
				}
			}
			sort.Strings(all)
			for _, mp := range mine {
				prefix := mp + string(os.PathSeparator)
				if mp == "/" {
					prefix = mp
				}
				prev := ""
				for _, other := range all {
					if !strings.HasPrefix(other, prefix) || (prev != "" && strings.HasPrefix(other, prev)) {
						continue
					}
					prev = other + string(os.PathSeparator)
					rel := other[len(prefix):]
					if !filepath.IsLocal(rel) {
						return nil, fmt.Errorf("nested mount point %s of container %s: %w", other, c.Name, ErrUnsafePath)
					}
					dirs = append(dirs, rel)
				}
			}
		}
	}
	sort.Strings(dirs)
	return dirs, nil
}

// makeNestedMountpoints makes the directories nestedMountpoints names in
// the volume directory dir (as the kubelet's MakeNestedMountpoints, after
// the payload is written), beneath dir whatever its entries point at. A
// payload file in the way is an error naming it.
func makeNestedMountpoints(dir, name string, pod *corev1.Pod) error {
	dirs, err := nestedMountpoints(name, pod)
	if err != nil || len(dirs) == 0 {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("make nested mount points: %w", err)
	}
	defer root.Close()
	for _, d := range dirs {
		if err := root.MkdirAll(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("make nested mount point %s: %w", d, err)
		}
	}
	return nil
}
