package mounts

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
)

// Leftovers returns the mount points beneath the pod directory of uid,
// deepest and most recent first (the order Teardown unmounts them in).
// A pod that Teardown removed has none.
func (m *Volumes) Leftovers(uid types.UID) ([]string, error) {
	if err := checkUID(uid); err != nil {
		return nil, err
	}
	infos, err := m.podMounts(uid)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(infos))
	for i, mi := range infos {
		out[i] = mi.Mountpoint
	}
	return out, nil
}

// podMounts lists the mounts beneath the pod directory of uid in unmount
// order: later mounts before the ones they may cover, deeper before
// shallower.
func (m *Volumes) podMounts(uid types.UID) ([]*mountinfo.Info, error) {
	infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(m.PodDir(uid)))
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	slices.Reverse(infos) // mountinfo lists parents before the mounts on them
	slices.SortStableFunc(infos, func(a, b *mountinfo.Info) int {
		return strings.Count(b.Mountpoint, "/") - strings.Count(a.Mountpoint, "/")
	})
	return infos, nil
}

// Teardown unmounts everything beneath RootDir/pods/<uid> (deepest first,
// from /proc/self/mountinfo) and then removes the directory. It is safe to
// call repeatedly and for a uid that has no directory.
//
// Nothing is ever lost by it: removal never follows a symlink (a symlink
// is removed, not its target) and never descends into another mount; if a
// mount could not be unmounted, or one appears during the removal, it
// returns an error wrapping ErrMountsRemain and leaves that part in place.
// A mount that is busy is detached (MNT_DETACH) so that its content stays
// with whoever still uses it and is never deleted through the pod
// directory.
func (m *Volumes) Teardown(ctx context.Context, uid types.UID) error {
	if err := checkUID(uid); err != nil {
		return fmt.Errorf("tear down pod %s: %w", uid, err)
	}
	dir := m.PodDir(uid)
	m.forgetOwned(dir)
	m.forgetClaims(dir)
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	// A mount(8) that has not returned would land on a directory being
	// removed: wait for the next teardown.
	if t, busy := m.nfs.busy(dir); busy {
		return fmt.Errorf("tear down pod %s: %w: %s: %w", uid, ErrMountsRemain, t, ErrMountInProgress)
	}
	infos, err := m.podMounts(uid)
	if err != nil {
		return fmt.Errorf("tear down pod %s: %w", uid, err)
	}
	if err := m.isolateHostMounts(uid, infos); err != nil {
		return fmt.Errorf("tear down pod %s: %w: %w", uid, ErrMountsRemain, err)
	}
	for _, mi := range infos {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("tear down pod %s: %w", uid, err)
		}
		if isNFS(mi.FSType) {
			if err := m.unmountNFS(mi.Mountpoint); err != nil {
				return fmt.Errorf("tear down pod %s: %w", uid, err)
			}
			continue
		}
		if err := m.unmount(mi.Mountpoint); err != nil {
			return fmt.Errorf("tear down pod %s: %w", uid, err)
		}
	}
	if left, err := m.podMounts(uid); err != nil {
		return fmt.Errorf("tear down pod %s: %w", uid, err)
	} else if len(left) > 0 {
		return fmt.Errorf("tear down pod %s: %w: %s", uid, ErrMountsRemain, left[0].Mountpoint)
	}

	podsFd, err := unix.Open(m.podsDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("tear down pod %s: open %s: %w", uid, m.podsDir, err)
	}
	defer unix.Close(podsFd)
	var st unix.Statx_t
	if err := unix.Statx(podsFd, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &st); err != nil {
		return fmt.Errorf("tear down pod %s: statx %s: %w", uid, m.podsDir, err)
	}
	if st.Mask&unix.STATX_MNT_ID == 0 {
		return fmt.Errorf("tear down pod %s: %w: statx gives no mount ids (kernel before 5.8)", uid, ErrUnsupported)
	}
	if err := removeBeneath(ctx, podsFd, string(uid), st.Mnt_id, dir); err != nil {
		return fmt.Errorf("tear down pod %s: %w", uid, err)
	}
	m.log.Info("removed pod volumes", "pod_uid", string(uid), "path", dir, "unmounted", len(infos))
	return nil
}

// isolateHostMounts makes the pod's mounts that can show the host's
// mounts slaves, with every mount beneath them (isolateMount), before any
// is unmounted:
//
//   - the hostPath holder: the hostPath binds beneath it are recursive and
//     peers of the host's mounts;
//   - every subPath bind (volume-subpaths/<volume>/<container>/<i>): one of
//     a hostPath is bound from inside the hostPath's bind, and one of a
//     local volume's directory from inside its bind of the host's
//     directory, so it is a peer of the host's mount too, and a mount the
//     host makes beneath the subPath later propagates into it.
//
// Unmounting a copy beneath a peer of the host's mount would otherwise
// unmount the host's mount it was copied from. Isolating a subPath bind of
// the pod's own volumes changes nothing: the mounts beneath it are the
// pod's, and Teardown unmounts each of them itself; nor does it keep its
// own unmount from reaching its copies, which follows the propagation of
// its parent, not its own. infos are the pod's mounts; the mounts are
// reached through descriptors opened beneath RootDir/pods, in directories
// only the agent makes.
func (m *Volumes) isolateHostMounts(uid types.UID, infos []*mountinfo.Info) error {
	dir := m.PodDir(uid)
	holder := filepath.Join(volumesDirName, PluginHostPath)
	var rels []string
	for _, mi := range infos {
		rel, err := filepath.Rel(dir, mi.Mountpoint)
		if err != nil {
			continue
		}
		if rel == holder || isSubPathBind(rel) {
			rels = append(rels, rel)
		}
	}
	if len(rels) == 0 {
		return nil
	}
	podsFd, err := m.openPodsDir()
	if err != nil {
		return err
	}
	defer unix.Close(podsFd)
	for _, rel := range rels {
		parent, err := openBeneath(podsFd, filepath.Join(string(uid), filepath.Dir(rel)), unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return err
		}
		err = isolateMount(parent, filepath.Base(rel))
		unix.Close(parent)
		if err != nil {
			return err
		}
	}
	return nil
}

// isSubPathBind reports whether rel, relative to a pod's directory, is a
// subPath bind's target: volume-subpaths/<volume>/<container>/<index>.
func isSubPathBind(rel string) bool {
	parts := strings.Split(rel, "/")
	return len(parts) == 4 && parts[0] == volumeSubpathsDir
}

// unmount unmounts the mount point p without following a symlink at it;
// busy, it is detached. A mount point that is already gone is fine.
func (m *Volumes) unmount(p string) error {
	err := unix.Unmount(p, unix.UMOUNT_NOFOLLOW)
	switch {
	case err == nil:
		m.log.Info("unmounted", "path", p)
		return nil
	case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT):
		return nil // unmounted meanwhile
	case errors.Is(err, unix.EBUSY):
		if err := unix.Unmount(p, unix.UMOUNT_NOFOLLOW|unix.MNT_DETACH); err != nil {
			return fmt.Errorf("%w: detach busy %s: %w", ErrMountsRemain, p, err)
		}
		m.log.Warn("detached busy mount", "path", p)
		return nil
	default:
		return fmt.Errorf("%w: unmount %s: %w", ErrMountsRemain, p, err)
	}
}

// unmountNFS unmounts an NFS volume, bounded (nfsClient.unmount).
func (m *Volumes) unmountNFS(p string) error {
	detached, err := m.nfs.unmount(p)
	switch {
	case err != nil:
		return err
	case detached:
		m.log.Warn("detached nfs mount whose unmount did not return (server not answering)", "path", p, "timeout", 2*m.nfs.unmountTimeout)
	default:
		m.log.Info("unmounted nfs", "path", p)
	}
	return nil
}

// removeBeneath removes name in the directory parentFd and everything
// beneath it, without following symlinks and without touching anything on
// a mount other than mntID. p is name's path, for errors.
func removeBeneath(ctx context.Context, parentFd int, name string, mntID uint64, p string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var st unix.Statx_t
	if err := unix.Statx(parentFd, name, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_TYPE|unix.STATX_MNT_ID, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("statx %s: %w", p, err)
	}
	if st.Mnt_id != mntID {
		return fmt.Errorf("%w: %s is on another mount", ErrMountsRemain, p)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlinkat(parentFd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("remove %s: %w", p, err)
		}
		return nil
	}
	fd, err := unix.Openat(parentFd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", p, err)
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	// Check the opened directory, not just the name: it may have been
	// replaced by a mount point between statx and open.
	var fst unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &fst); err != nil {
		return fmt.Errorf("statx %s: %w", p, err)
	}
	if fst.Mnt_id != mntID {
		return fmt.Errorf("%w: %s is on another mount", ErrMountsRemain, p)
	}
	// Read every name before removing any: removing entries while
	// reading a directory can make getdents skip some.
	names, err := f.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("list %s: %w", p, err)
	}
	for _, n := range names {
		if err := removeBeneath(ctx, fd, n, mntID, p+"/"+n); err != nil {
			return err
		}
	}
	if err := unix.Unlinkat(parentFd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	return nil
}

// GC tears down the pod directory of every uid that is not in live and
// returns the uids it removed. It goes on after a failure and returns
// every error joined.
func (m *Volumes) GC(ctx context.Context, live map[types.UID]bool) ([]types.UID, error) {
	uids, err := m.PodDirs()
	if err != nil {
		return nil, fmt.Errorf("gc pod volumes: %w", err)
	}
	var removed []types.UID
	var errs []error
	for _, uid := range uids {
		if live[uid] {
			continue
		}
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		if err := m.Teardown(ctx, uid); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, uid)
	}
	if len(errs) > 0 {
		return removed, fmt.Errorf("gc pod volumes: %w", errors.Join(errs...))
	}
	return removed, nil
}
