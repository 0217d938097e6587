package mounts

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// checkHostPath enforces the node's policy and the volume's type on the
// hostPath p (see openCheckedHostPath) and keeps no descriptor: Validate's
// check, with create false.
func (m *Volumes) checkHostPath(p string, typ corev1.HostPathType, create bool) error {
	fd, err := m.openCheckedHostPath(p, typ, create)
	if fd >= 0 {
		unix.Close(fd)
	}
	return err
}

// openCheckedHostPath enforces the node's policy and the volume's type on
// the hostPath p and returns an O_PATH descriptor of the object it checked
// (-1 when p does not exist and that is allowed):
//
//   - p must lie beneath a Config.HostPathAllow prefix, and resolving it
//     from that prefix (openat2 RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS) must
//     not leave it: a symlink inside an allowed tree cannot lend access to
//     the rest of the host;
//   - with create, DirectoryOrCreate makes the missing directories (0755)
//     and FileOrCreate the missing parents (0755) and an empty file (0644),
//     each with mkdirat/openat beneath the prefix; so does type "" make a
//     missing directory, which the runtime would otherwise make by its
//     path;
//   - Directory, File, Socket, CharDevice and BlockDevice must exist with
//     that type (the OrCreate types too, when create is false and the path
//     exists); the type is read with fstat on the returned descriptor, so
//     it is the type of the object that was checked, never of a symlink's
//     target elsewhere;
//   - type "" checks nothing beyond the allowlist (as the kubelet).
//
// The caller mounts the descriptor, never p again (setupHostPath).
func (m *Volumes) openCheckedHostPath(p string, typ corev1.HostPathType, create bool) (int, error) {
	if !path.IsAbs(p) || slices.Contains(strings.Split(p, "/"), "..") {
		return -1, fmt.Errorf("%w: %q must be an absolute path without '..'", ErrUnsafePath, p)
	}
	root, rel, ok := m.hostPathRoot(p)
	if !ok {
		return -1, fmt.Errorf("%w: %s", ErrHostPathNotAllowed, p)
	}
	orCreate := typ == corev1.HostPathDirectoryOrCreate || typ == corev1.HostPathFileOrCreate
	if create && orCreate {
		if err := createHostPath(root, rel, typ); err != nil {
			return -1, fmt.Errorf("create hostPath %s: %w", p, err)
		}
	}

	fd, err := m.openHostPath(p, unix.O_PATH)
	if errors.Is(err, unix.ENOENT) && create && typ == corev1.HostPathUnset {
		if err := createHostPath(root, rel, corev1.HostPathDirectoryOrCreate); err != nil {
			return -1, fmt.Errorf("create hostPath %s: %w", p, err)
		}
		fd, err = m.openHostPath(p, unix.O_PATH)
	}
	if errors.Is(err, unix.ENOENT) {
		if !create && (typ == corev1.HostPathUnset || orCreate) {
			return -1, nil // nothing to check; Setup creates them
		}
		return -1, fmt.Errorf("%w: %s does not exist", ErrHostPathType, p)
	}
	if err != nil {
		return -1, fmt.Errorf("check hostPath %s: %w", p, err)
	}
	if typ == corev1.HostPathUnset {
		return fd, nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("stat hostPath %s: %w", p, err)
	}
	if want, name := hostPathFileType(typ); st.Mode&unix.S_IFMT != want {
		unix.Close(fd)
		return -1, fmt.Errorf("%w: %s is not a %s", ErrHostPathType, p, name)
	}
	return fd, nil
}

// openHostPath opens the hostPath p beneath the allowlist prefix that
// contains it (see hostPathRoot). A path that is itself an allowlist entry
// is opened as it is: the node's administrator named it.
func (m *Volumes) openHostPath(p string, flags int) (int, error) {
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

// setupHostPath checks the hostPath h of the pod volume name
// (openCheckedHostPath, making the OrCreate types) and bind mounts the
// object it checked, through its descriptor, onto
// RootDir/pods/<uid>/volumes/kubernetes.io~host-path/<name>, which is the
// path handed to the runtime: a pod that can write in an allowed tree and
// swaps a directory of it for a symlink after the check gets what was
// checked, never the symlink's target, even though the runtime resolves the
// path again when it creates a container.
//
// The bind is recursive, as the runtime's rbind of the path would be, and
// keeps the propagation of the hostPath's mount (shared, slave or private,
// as the table of the kernel's shared subtrees has it for a bind onto a
// private mount), so that mountPropagation HostToContainer and
// Bidirectional see the host's mounts as they would by the path. Its
// directory, the pod's hostPath holder, is a bind mount of itself made
// unbindable (ensureHostPathHolder).
func (m *Volumes) setupHostPath(pod *corev1.Pod, name string, h *corev1.HostPathVolumeSource, readOnly bool) (*volume, error) {
	if !validComponent(name) {
		return nil, volumeErr("set up", name, h.Path, fmt.Errorf("%w: volume name %q", ErrUnsafePath, name))
	}
	typ := corev1.HostPathUnset
	if h.Type != nil {
		typ = *h.Type
	}
	src, err := m.openCheckedHostPath(h.Path, typ, true)
	if err != nil {
		return nil, volumeErr("set up", name, h.Path, err)
	}
	defer unix.Close(src)
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil {
		return nil, volumeErr("set up", name, h.Path, fmt.Errorf("stat hostPath: %w", err))
	}
	holderRel, err := m.ensureHostPathHolder(pod.UID)
	if err != nil {
		return nil, volumeErr("set up", name, filepath.Join(m.podsDir, holderRel), err)
	}
	target, mounted, err := m.bindChecked(checkedBind{src: src, srcSt: &st, parentRel: holderRel, name: name, recursive: true})
	if err != nil {
		return nil, volumeErr("set up", name, target, fmt.Errorf("hostPath %s: %w", h.Path, err))
	}
	if mounted {
		m.log.Info("mounted hostPath", "pod_uid", string(pod.UID), "volume", name, "host_path", h.Path, "path", target)
	}
	return &volume{name: name, plugin: PluginHostPath, path: target, readOnly: readOnly, createSubPaths: true}, nil
}

// ensureHostPathHolder makes RootDir/pods/<uid>/volumes/kubernetes.io~host-path
// a bind mount of itself, unbindable, and returns its path relative to
// RootDir/pods. The hostPath binds beneath it are then:
//
//   - never propagated to the peers of RootDir's mount (on a node whose
//     root is shared, every mount namespace that is its slave would get a
//     copy of each recursive bind);
//   - never copied by a recursive bind of a tree that holds them: the
//     runtime's rbind of a hostPath such as "/" (or another pod's
//     hostPath bind of it) skips unbindable mounts, so the binds do not
//     nest into each other and the mount table does not double with each
//     such pod;
//   - peers (or slaves) of the hostPath's own mount, which a private or
//     unbindable parent leaves them.
func (m *Volumes) ensureHostPathHolder(uid types.UID) (string, error) {
	rel := filepath.Join(string(uid), volumesDirName, PluginHostPath)
	podsFd, err := m.openPodsDir()
	if err != nil {
		return rel, err
	}
	defer unix.Close(podsFd)
	fd, err := mkdirAllBeneath(podsFd, rel, bindTargetMode)
	if err != nil {
		return rel, err
	}
	defer unix.Close(fd)
	mounted, err := mountinfo.Mounted(filepath.Join(m.podsDir, rel))
	if err != nil {
		return rel, fmt.Errorf("hostPath holder: %w", err)
	}
	if !mounted {
		if err := unix.Mount(fdPath(fd), fdPath(fd), "", unix.MS_BIND, ""); err != nil {
			return rel, fmt.Errorf("hostPath holder: bind mount: %w", err)
		}
	}
	// Made unbindable every time: an agent killed between the bind and
	// this leaves a bindable holder for the next Setup to fix.
	top, err := openBeneath(podsFd, rel, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return rel, fmt.Errorf("hostPath holder: %w", err)
	}
	defer unix.Close(top)
	if err := unix.Mount("", fdPath(top), "", unix.MS_UNBINDABLE, ""); err != nil {
		return rel, fmt.Errorf("hostPath holder: make unbindable: %w", err)
	}
	return rel, nil
}
