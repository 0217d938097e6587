package mounts

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// bindTargetMode is the mode of the directories that hold bind mount
// targets (volume-subpaths, the hostPath holder) and of directory targets:
// the agent's own, like the pod directory.
const bindTargetMode = podDirMode

// checkedBind is a bind mount of an object that was opened (and checked)
// as a descriptor onto a target beneath RootDir/pods.
type checkedBind struct {
	// src is the descriptor of the checked object (O_PATH is enough);
	// srcSt its fstat.
	src   int
	srcSt *unix.Stat_t
	// parentRel is the target's directory relative to RootDir/pods, made
	// (mkdirat beneath RootDir/pods) when missing; name the target in it.
	parentRel, name string
	// recursive binds the mounts beneath the object too (MS_REC), as the
	// runtime's rbind of a path would show them.
	recursive bool
}

// bindChecked bind mounts b.src through its procfs descriptor link onto its
// target and returns the target's path: the object mounted is the object
// that was checked, whatever happens to the path it was found by. The
// target is a directory for a directory, an empty file for anything else
// (makeTarget). A target that already shows the same object is reused;
// one that shows another (the path now names another object) is unmounted
// and mounted again. After mounting, the target is checked to show the
// object. mounted says whether this call mounted it.
func (m *Volumes) bindChecked(b checkedBind) (target string, mounted bool, err error) {
	podsFd, err := m.openPodsDir()
	if err != nil {
		return m.podsDir, false, err
	}
	defer unix.Close(podsFd)
	parent, err := mkdirAllBeneath(podsFd, b.parentRel, bindTargetMode)
	if err != nil {
		return filepath.Join(m.podsDir, b.parentRel), false, err
	}
	defer unix.Close(parent)
	target = filepath.Join(m.podsDir, b.parentRel, b.name)

	present, err := mountinfo.Mounted(target)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return target, false, err
	}
	if present {
		var st unix.Stat_t
		if err := unix.Fstatat(parent, b.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return target, false, err
		}
		if sameFile(&st, b.srcSt) {
			return target, false, nil
		}
		if err := unmountStale(parent, b.name, target, b.recursive); err != nil {
			return target, false, err
		}
	}

	tfd, err := makeTarget(parent, b.name, b.srcSt.Mode&unix.S_IFMT == unix.S_IFDIR)
	if err != nil {
		return target, false, err
	}
	defer unix.Close(tfd)
	flags := uintptr(unix.MS_BIND)
	if b.recursive {
		flags |= unix.MS_REC
	}
	if err := unix.Mount(fdPath(b.src), fdPath(tfd), "", flags, ""); err != nil {
		return target, false, fmt.Errorf("bind mount: %w", err)
	}
	// Check that what the target shows now is the object that was checked.
	var st unix.Stat_t
	if err := unix.Fstatat(parent, b.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || !sameFile(&st, b.srcSt) {
		uerr := unmountStale(parent, b.name, target, b.recursive)
		return target, false, errors.Join(fmt.Errorf("%w: bind mount shows another object", ErrUnsafePath), err, uerr)
	}
	return target, true, nil
}

// unmountStale unmounts the bind mount at name in parent (target is its
// path). A recursive one is first made a slave, recursively: the mounts
// beneath it are copies of the host's, and unmounting a copy that is a
// peer of the host's mount would unmount the host's too; it is then
// detached whole.
func unmountStale(parent int, name, target string, recursive bool) error {
	if !recursive {
		if err := unix.Unmount(target, unix.UMOUNT_NOFOLLOW); err != nil {
			return fmt.Errorf("unmount stale bind mount: %w", err)
		}
		return nil
	}
	if err := isolateMount(parent, name); err != nil {
		return fmt.Errorf("unmount stale bind mount: %w", err)
	}
	if err := unix.Unmount(target, unix.UMOUNT_NOFOLLOW|unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount stale bind mount: %w", err)
	}
	return nil
}

// isolateMount makes the mount at name in parent, and every mount beneath
// it, a slave (MS_SLAVE|MS_REC): from then on nothing done to them
// propagates back to their peers, and unmounting them cannot unmount the
// host's mounts they were copied from. The mount is reached through a
// descriptor opened without following a symlink, never by a path that
// the pod could have changed.
func isolateMount(parent int, name string) error {
	fd, err := unix.Openat(parent, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", name, err)
	}
	defer unix.Close(fd)
	if err := unix.Mount("", fdPath(fd), "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s a slave: %w", name, err)
	}
	return nil
}

// makeTarget makes (or reuses) the bind mount target name in parent: a
// directory for a directory source, an empty file for anything else, and
// returns an O_PATH descriptor of it. A target of the wrong type, left by an
// earlier mount of another object, is replaced.
func makeTarget(parent int, name string, dir bool) (int, error) {
	var st unix.Stat_t
	err := unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case err == nil && (st.Mode&unix.S_IFMT == unix.S_IFDIR) != dir:
		flags := 0
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			flags = unix.AT_REMOVEDIR
		}
		if err := unix.Unlinkat(parent, name, flags); err != nil {
			return -1, fmt.Errorf("replace target: %w", err)
		}
	case err != nil && !errors.Is(err, unix.ENOENT):
		return -1, err
	}
	if dir {
		if err := unix.Mkdirat(parent, name, bindTargetMode); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, err
		}
		return unix.Openat(parent, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	fd, err := unix.Openat(parent, name, unix.O_CREAT|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o640)
	if err != nil {
		return -1, err
	}
	// An O_PATH descriptor is all the mount needs.
	pfd, err := unix.Openat(parent, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	unix.Close(fd)
	return pfd, err
}
