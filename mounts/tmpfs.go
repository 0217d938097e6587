package mounts

import (
	"fmt"
	"strconv"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// tmpfsFlags are the kubelet's: no set-uid binaries and no device nodes
// from a volume that any container may write.
const tmpfsFlags = unix.MS_NOSUID | unix.MS_NODEV

// ensureTmpfs mounts a tmpfs of size bytes with root mode mode on the
// directory dirFd (at path dir, for mountinfo and logs), unless one is
// already mounted there. A different file system mounted there is an
// error: nothing is stacked on it. The mount goes through dirFd's procfs
// link, so it lands on the directory that was opened beneath the pod root.
func (m *Volumes) ensureTmpfs(dirFd int, dir string, size int64, mode uint32) (mounted bool, err error) {
	already, err := mountinfo.Mounted(dir)
	if err != nil {
		return false, fmt.Errorf("check mount %s: %w", dir, err)
	}
	if already {
		// dirFd names the directory beneath the mount: statfs the path,
		// which crosses into the mounted file system.
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			return false, fmt.Errorf("statfs %s: %w", dir, err)
		}
		if st.Type != unix.TMPFS_MAGIC {
			return false, fmt.Errorf("%s: a file system other than tmpfs (magic %#x) is mounted there", dir, st.Type)
		}
		return false, nil
	}
	opts := "size=" + strconv.FormatInt(size, 10) + ",mode=" + strconv.FormatUint(uint64(mode), 8)
	if err := unix.Mount("tmpfs", fdPath(dirFd), "tmpfs", tmpfsFlags, opts); err != nil {
		return false, fmt.Errorf("mount tmpfs (%s) on %s: %w", opts, dir, err)
	}
	m.log.Info("mounted tmpfs", "path", dir, "size_bytes", size)
	return true, nil
}

// memoryVolumeSize is the size of a memory-backed volume of pod, as the
// kubelet's calculateEmptyDirMemorySize: the node's memory, lowered to the
// pod's memory limit when the pod has one, lowered to sizeLimit when that is
// set and smaller still. A tmpfs is charged to the memory cgroup of whoever
// writes it, so a size above what the pod may use only hides the limit.
func memoryVolumeSize(nodeMemory int64, pod *corev1.Pod, sizeLimit *resource.Quantity) int64 {
	size := nodeMemory
	if lim, ok := PodMemoryLimit(pod); ok && lim > 0 && lim < size {
		size = lim
	}
	if sizeLimit != nil {
		if v := sizeLimit.Value(); v > 0 && v < size {
			size = v
		}
	}
	return size
}

// PodMemoryLimit is the pod's memory limit as the kubelet's pod cgroup gets
// it: the sum of its containers' limits, or the largest init container's
// limit if that is larger, and only when every container (init ones too)
// sets a memory limit. ok is false when one does not.
func PodMemoryLimit(pod *corev1.Pod) (limit int64, ok bool) {
	var sum int64
	for i := range pod.Spec.Containers {
		q, set := pod.Spec.Containers[i].Resources.Limits[corev1.ResourceMemory]
		if !set {
			return 0, false
		}
		sum += q.Value()
	}
	for i := range pod.Spec.InitContainers {
		q, set := pod.Spec.InitContainers[i].Resources.Limits[corev1.ResourceMemory]
		if !set {
			return 0, false
		}
		sum = max(sum, q.Value())
	}
	return sum, len(pod.Spec.Containers)+len(pod.Spec.InitContainers) > 0
}
