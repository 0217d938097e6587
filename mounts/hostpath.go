package mounts

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// checkHostPath enforces the node's policy and the volume's type on the
// hostPath p:
//
//   - p must lie beneath a Config.HostPathAllow prefix, and resolving it
//     from that prefix (openat2 RESOLVE_BENEATH) must not leave it: a
//     symlink inside an allowed tree cannot lend access to the rest of the
//     host;
//   - with create, DirectoryOrCreate makes the missing directories (0755)
//     and FileOrCreate the missing parents (0755) and an empty file (0644);
//   - Directory, File, Socket, CharDevice and BlockDevice must exist with
//     that type (the OrCreate types too, when create is false and the path
//     exists); the type is read with fstat on the descriptor that the
//     beneath-resolution opened, so it is the type of the object that was
//     checked, never of a symlink's target elsewhere;
//   - type "" checks nothing beyond the allowlist (as the kubelet).
func (m *Manager) checkHostPath(p string, typ corev1.HostPathType, create bool) error {
	if !path.IsAbs(p) || slices.Contains(strings.Split(p, "/"), "..") {
		return fmt.Errorf("%w: %q must be an absolute path without '..'", ErrUnsafePath, p)
	}
	root, rel, ok := m.hostPathRoot(p)
	if !ok {
		return fmt.Errorf("%w: %s", ErrHostPathNotAllowed, p)
	}
	orCreate := typ == corev1.HostPathDirectoryOrCreate || typ == corev1.HostPathFileOrCreate
	if create && orCreate {
		if err := createHostPath(root, rel, typ); err != nil {
			return fmt.Errorf("create hostPath %s: %w", p, err)
		}
	}

	fd, err := m.openHostPath(p, unix.O_PATH)
	if errors.Is(err, unix.ENOENT) {
		if typ == corev1.HostPathUnset || orCreate && !create {
			return nil // nothing to check; Setup creates the OrCreate types
		}
		return fmt.Errorf("%w: %s does not exist", ErrHostPathType, p)
	}
	if err != nil {
		return fmt.Errorf("check hostPath %s: %w", p, err)
	}
	defer unix.Close(fd)
	if typ == corev1.HostPathUnset {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat hostPath %s: %w", p, err)
	}
	if want, name := hostPathFileType(typ); st.Mode&unix.S_IFMT != want {
		return fmt.Errorf("%w: %s is not a %s", ErrHostPathType, p, name)
	}
	return nil
}

// openHostPath opens the hostPath p beneath the allowlist prefix that
// contains it (see hostPathRoot). A path that is itself an allowlist entry
// is opened as it is: the node's administrator named it.
func (m *Manager) openHostPath(p string, flags int) (int, error) {
	root, rel, ok := m.hostPathRoot(p)
	if !ok {
		return -1, fmt.Errorf("%w: %s", ErrHostPathNotAllowed, p)
	}
	if slices.Contains(m.allow, filepath.Clean(p)) {
		fd, err := unix.Open(p, flags|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("open %s: %w", p, err)
		}
		return fd, nil
	}
	rootFd, err := openDir(root)
	if err != nil {
		return -1, err
	}
	defer unix.Close(rootFd)
	return openBeneath(rootFd, rel, flags)
}

// hostPathFileType is the S_IFMT type that a hostPath type asks for.
func hostPathFileType(typ corev1.HostPathType) (uint32, string) {
	switch typ {
	case corev1.HostPathDirectory, corev1.HostPathDirectoryOrCreate:
		return unix.S_IFDIR, "directory"
	case corev1.HostPathFile, corev1.HostPathFileOrCreate:
		return unix.S_IFREG, "file"
	case corev1.HostPathSocket:
		return unix.S_IFSOCK, "socket"
	case corev1.HostPathCharDev:
		return unix.S_IFCHR, "character device"
	case corev1.HostPathBlockDev:
		return unix.S_IFBLK, "block device"
	}
	return 0, string(typ)
}

// knownHostPathType reports whether typ is one of the hostPath types.
func knownHostPathType(typ corev1.HostPathType) bool {
	if typ == corev1.HostPathUnset {
		return true
	}
	want, _ := hostPathFileType(typ)
	return want != 0
}

// createHostPath makes the DirectoryOrCreate or FileOrCreate hostPath rel
// beneath the directory root.
func createHostPath(root, rel string, typ corev1.HostPathType) error {
	rootFd, err := openDir(root)
	if err != nil {
		return err
	}
	defer unix.Close(rootFd)
	if typ == corev1.HostPathFileOrCreate {
		return createFileBeneath(rootFd, rel)
	}
	fd, err := mkdirAllBeneath(rootFd, rel, hostPathDirMode)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// createFileBeneath makes the missing parent directories of rel beneath
// dirFd and an empty regular file at rel if nothing is there.
func createFileBeneath(dirFd int, rel string) error {
	dir, base := path.Split(rel)
	if base == "" || base == "." || base == ".." {
		return fmt.Errorf("%w: %q does not name a file", ErrUnsafePath, rel)
	}
	parent, err := mkdirAllBeneath(dirFd, dir, hostPathDirMode)
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	fd, err := unix.Openat(parent, base, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, hostPathFileMod)
	switch {
	case err == nil:
		// The create mode went through the umask: set it as asked.
		err = unix.Fchmod(fd, hostPathFileMod)
		if cerr := unix.Close(fd); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("create %s: %w", rel, err)
		}
		return nil
	case errors.Is(err, unix.EEXIST):
		return nil // checked by the caller
	default:
		return fmt.Errorf("create %s: %w", rel, err)
	}
}
