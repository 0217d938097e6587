package mounts

import (
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
)

// The kubelet's volume ownership masks (pkg/volume/volume_linux.go): a
// writable volume's files become group read-write, a read-only one's group
// readable; directories also group-searchable and setgid, so that files
// made later inherit the group.
const (
	ownershipRWMask   fs.FileMode = 0o660
	ownershipROMask   fs.FileMode = 0o440
	ownershipExecMask fs.FileMode = 0o110
)

// ownershipMask is what every file (dir false) or directory of a volume
// must have for fsGroup.
func ownershipMask(readOnly, dir bool) fs.FileMode {
	mask := ownershipRWMask
	if readOnly {
		mask = ownershipROMask
	}
	if dir {
		mask |= fs.ModeSetgid | ownershipExecMask
	}
	return mask
}

// needsOwnership is the kubelet's requiresPermissionChange: the volume's
// root is not owned by gid, or lacks the mask's bits. With
// fsGroupChangePolicy OnRootMismatch only such a volume is walked.
func needsOwnership(dir string, gid int64, readOnly bool) (bool, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return false, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false, fmt.Errorf("stat %s: no owner", dir)
	}
	mask := ownershipMask(readOnly, fi.IsDir())
	return int64(st.Gid) != gid || fi.Mode()&mask != mask, nil
}

// setOwnership is the kubelet's SetVolumeOwnership: every file and
// directory beneath dir gets group gid and the mask's bits; symlinks get
// the group only (their mode means nothing). The walk goes through an
// os.Root and never follows a symlink, so a link a container planted in
// its volume cannot make the agent chown a host file.
func setOwnership(dir string, gid int64, readOnly bool) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("set ownership of %s: %w", dir, err)
	}
	defer root.Close()
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := root.Lchown(p, -1, int(gid)); err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		return root.Chmod(p, fi.Mode()|ownershipMask(readOnly, d.IsDir()))
	})
	if err != nil {
		return fmt.Errorf("set ownership of %s to group %d: %w", dir, gid, err)
	}
	return nil
}

// fsGroup returns the pod's fsGroup and whether its change policy is
// OnRootMismatch (Always when unset, as the API defaults nothing).
func fsGroup(pod *corev1.Pod) (gid int64, onRootMismatch, ok bool) {
	sc := pod.Spec.SecurityContext
	if sc == nil || sc.FSGroup == nil {
		return 0, false, false
	}
	p := sc.FSGroupChangePolicy
	return *sc.FSGroup, p != nil && *p == corev1.FSGroupChangeOnRootMismatch, true
}

// ownVolume applies the pod's fsGroup to volume dir as the kubelet does
// at mount. first says that this Volumes has not set the volume up
// before: policy Always walks then (the kubelet walks at every mount,
// which nodeguard does once per volume), OnRootMismatch only when the
// root is not yet right. A volume whose root is not right is walked under
// either policy.
func (m *Volumes) ownVolume(pod *corev1.Pod, dir string, readOnly bool) error {
	gid, onRootMismatch, ok := fsGroup(pod)
	if !ok {
		return nil
	}
	first := m.markOwned(dir)
	need, err := needsOwnership(dir, gid, readOnly)
	if err != nil {
		return fmt.Errorf("check ownership of %s: %w", dir, err)
	}
	if !need && (onRootMismatch || !first) {
		return nil
	}
	return setOwnership(dir, gid, readOnly)
}

// markOwned records that dir was set up, and reports whether it was not
// before.
func (m *Volumes) markOwned(dir string) bool {
	m.ownedMu.Lock()
	defer m.ownedMu.Unlock()
	if m.owned == nil {
		m.owned = map[string]bool{}
	}
	if m.owned[dir] {
		return false
	}
	m.owned[dir] = true
	return true
}

// forgetOwned drops the records of the volumes beneath podDir.
func (m *Volumes) forgetOwned(podDir string) {
	m.ownedMu.Lock()
	defer m.ownedMu.Unlock()
	for d := range m.owned {
		if strings.HasPrefix(d, podDir+"/") {
			delete(m.owned, d)
		}
	}
}
