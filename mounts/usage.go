package mounts

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// maxUsageEntries bounds the walk of one disk-backed volume. A walk costs
// about one statx per entry (~1 µs warm, far more cold): a million entries
// is seconds of work, past which a measurement is too slow to drive
// eviction and the volume is reported as unmeasurable instead.
const maxUsageEntries = 1_000_000

// Media reported in VolumeUsage.Medium.
const (
	MediumDisk   = "Disk"
	MediumMemory = "Memory"
)

// VolumeUsage is what one volume of a pod uses.
type VolumeUsage struct {
	// Plugin and Name identify the volume (PluginEmptyDir, the pod's name
	// for it).
	Plugin, Name string
	// Bytes is the space used: st_blocks*512 summed over the volume's
	// files (each inode once), or a tmpfs's used blocks.
	Bytes uint64
	// Inodes is the number of inodes used, the volume's root included.
	Inodes uint64
	// Medium is MediumDisk or MediumMemory.
	Medium string
}

// Usage measures the emptyDir volumes of pod (whose uid must be uid), in
// the order of pod.Spec.Volumes. A memory-backed volume is measured with
// statfs on its tmpfs; a disk-backed one by a walk bounded by
// maxUsageEntries that does not follow symlinks and does not cross into
// other mounts. A volume that Setup has not made is an error wrapping
// fs.ErrNotExist.
func (m *Volumes) Usage(uid types.UID, pod *corev1.Pod) ([]VolumeUsage, error) {
	if err := checkUID(uid); err != nil {
		return nil, err
	}
	podsFd, err := m.openPodsDir()
	if err != nil {
		return nil, fmt.Errorf("measure volumes of pod %s: %w", uid, err)
	}
	defer unix.Close(podsFd)
	var out []VolumeUsage
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if v.EmptyDir == nil {
			continue
		}
		medium := MediumDisk
		if v.EmptyDir.Medium == corev1.StorageMediumMemory {
			medium = MediumMemory
		}
		u, err := m.measure(podsFd, uid, PluginEmptyDir, v.Name, medium)
		if err != nil {
			return nil, fmt.Errorf("measure volumes of pod %s: %w", uid, err)
		}
		out = append(out, u)
	}
	return out, nil
}

// EphemeralStorageUsage is the node disk used by the volumes of pod: its
// disk-backed emptyDir, configMap and downwardAPI volumes (secret and
// projected volumes are on tmpfs, hostPaths are the node's). It is the
// volume part of the pod's ephemeral-storage use; the runtime reports the
// containers' writable layers and logs.
func (m *Volumes) EphemeralStorageUsage(uid types.UID, pod *corev1.Pod) (bytes, inodes uint64, err error) {
	if err := checkUID(uid); err != nil {
		return 0, 0, err
	}
	podsFd, err := m.openPodsDir()
	if err != nil {
		return 0, 0, fmt.Errorf("measure ephemeral storage of pod %s: %w", uid, err)
	}
	defer unix.Close(podsFd)
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		s := &v.VolumeSource
		onDisk := s.EmptyDir != nil && s.EmptyDir.Medium != corev1.StorageMediumMemory ||
			s.ConfigMap != nil || s.DownwardAPI != nil
		if !onDisk {
			continue
		}
		u, err := m.measure(podsFd, uid, volumePlugin(s), v.Name, MediumDisk)
		if err != nil {
			return 0, 0, fmt.Errorf("measure ephemeral storage of pod %s: %w", uid, err)
		}
		bytes += u.Bytes
		inodes += u.Inodes
	}
	return bytes, inodes, nil
}

func (m *Volumes) measure(podsFd int, uid types.UID, plugin, name, medium string) (VolumeUsage, error) {
	u := VolumeUsage{Plugin: plugin, Name: name, Medium: medium}
	rel := filepath.Join(string(uid), volumesDirName, plugin, name)
	p := filepath.Join(m.podsDir, rel)
	fd, err := openBeneath(podsFd, rel, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return u, volumeErr("measure", name, p, err)
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()

	if medium == MediumMemory {
		var st unix.Statfs_t
		if err := unix.Fstatfs(fd, &st); err != nil {
			return u, volumeErr("measure", name, p, err)
		}
		if st.Type != unix.TMPFS_MAGIC {
			return u, volumeErr("measure", name, p, errors.New("memory-backed volume has no tmpfs mounted"))
		}
		u.Bytes = (st.Blocks - st.Bfree) * uint64(st.Bsize)
		u.Inodes = st.Files - st.Ffree
		return u, nil
	}

	var st unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_BLOCKS|unix.STATX_MNT_ID, &st); err != nil {
		return u, volumeErr("measure", name, p, err)
	}
	w := usageWalk{mntID: st.Mnt_id, seen: map[uint64]bool{}}
	w.count(&st)
	if err := w.dir(f, p); err != nil {
		return u, volumeErr("measure", name, p, err)
	}
	u.Bytes, u.Inodes = w.bytes, w.inodes
	return u, nil
}

// usageWalk sums blocks and inodes over one mount's part of a tree.
type usageWalk struct {
	mntID         uint64
	bytes, inodes uint64
	entries       int
	// seen holds the inode numbers of files with several links, so that
	// each is counted once (as du does).
	seen map[uint64]bool
}

func (w *usageWalk) count(st *unix.Statx_t) {
	if st.Nlink > 1 && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if w.seen[st.Ino] {
			return
		}
		w.seen[st.Ino] = true
	}
	w.bytes += st.Blocks * 512
	w.inodes++
}

func (w *usageWalk) dir(f *os.File, p string) error {
	names, err := f.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("list %s: %w", p, err)
	}
	dirFd := int(f.Fd())
	for _, n := range names {
		if w.entries++; w.entries > maxUsageEntries {
			return fmt.Errorf("%w: more than %d entries", ErrUsageLimit, maxUsageEntries)
		}
		var st unix.Statx_t
		err := unix.Statx(dirFd, n, unix.AT_SYMLINK_NOFOLLOW,
			unix.STATX_TYPE|unix.STATX_INO|unix.STATX_NLINK|unix.STATX_BLOCKS|unix.STATX_MNT_ID, &st)
		if errors.Is(err, unix.ENOENT) {
			continue // removed meanwhile
		}
		if err != nil {
			return fmt.Errorf("statx %s/%s: %w", p, n, err)
		}
		if st.Mnt_id != w.mntID {
			continue // another mount: not this volume's space
		}
		w.count(&st)
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		cfd, err := unix.Openat(dirFd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return fmt.Errorf("open %s/%s: %w", p, n, err)
		}
		child := os.NewFile(uintptr(cfd), p+"/"+n)
		err = w.dir(child, p+"/"+n)
		child.Close()
		if err != nil {
			return err
		}
	}
	return nil
}
