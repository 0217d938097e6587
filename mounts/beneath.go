package mounts

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// openat2Retries bounds the retries of openat2 on EAGAIN, which the kernel
// returns for RESOLVE_BENEATH when a concurrent rename anywhere on the
// system might have moved a path component: it is transient.
const openat2Retries = 16

// openBeneath opens rel (relative to the directory dirFd) without letting
// the resolution leave dirFd: absolute symlinks, ".." above dirFd and
// symlinks that lead out are refused (EXDEV or ELOOP), and so are procfs
// magic links. Symlinks that stay beneath dirFd are followed. flags are
// open(2) flags; O_CLOEXEC is always added.
//
// It uses openat2(2) with RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS and falls
// back to a walk that refuses every symlink when the kernel has no openat2
// (before 5.6).
func openBeneath(dirFd int, rel string, flags int) (int, error) {
	how := unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	}
	if rel == "" {
		rel = "."
	}
	for range openat2Retries {
		fd, err := unix.Openat2(dirFd, rel, &how)
		switch {
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENOSYS):
			return openBeneathNoFollow(dirFd, rel, flags)
		default:
			return -1, escapeErr(rel, err)
		}
	}
	return -1, fmt.Errorf("openat2 %s: %w", rel, unix.EAGAIN)
}

// openBeneathNoFollow is openBeneath for kernels without openat2: it opens
// rel one component at a time with O_NOFOLLOW, so any symlink on the way is
// refused (ELOOP or ENOTDIR), which is stricter than openat2 but safe.
func openBeneathNoFollow(dirFd int, rel string, flags int) (int, error) {
	cur, err := unix.Openat(dirFd, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open .: %w", err)
	}
	parts := splitPath(rel)
	if len(parts) == 0 {
		unix.Close(cur)
		return unix.Openat(dirFd, ".", flags|unix.O_CLOEXEC, 0)
	}
	for i, c := range parts {
		if c == ".." {
			unix.Close(cur)
			return -1, fmt.Errorf("open %s: %w", rel, ErrUnsafePath)
		}
		f := unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if i == len(parts)-1 {
			f = flags | unix.O_NOFOLLOW | unix.O_CLOEXEC
		}
		next, err := unix.Openat(cur, c, f, 0)
		unix.Close(cur)
		if err != nil {
			return -1, escapeErr(rel, err)
		}
		cur = next
	}
	return cur, nil
}

// escapeErr wraps the errors by which the kernel refuses a resolution that
// would leave the root (EXDEV from RESOLVE_BENEATH, ELOOP from a refused
// symlink) in ErrUnsafePath as well, so callers can tell them apart.
func escapeErr(rel string, err error) error {
	if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ELOOP) {
		return fmt.Errorf("open %s: %w: it resolves outside its root (through a symlink or \"..\"): %w", rel, ErrUnsafePath, err)
	}
	return fmt.Errorf("open %s: %w", rel, err)
}

// splitPath returns the components of a relative path, without empty and
// "." components.
func splitPath(rel string) []string {
	var parts []string
	for _, c := range strings.Split(rel, "/") {
		if c != "" && c != "." {
			parts = append(parts, c)
		}
	}
	return parts
}

// mkdirAllBeneath makes every missing directory of rel beneath dirFd with
// exactly mode and returns an O_PATH descriptor of the last one. Each
// directory is made with mkdirat(2) in a parent opened beneath dirFd, so a
// symlink planted on the way cannot redirect the creation outside.
func mkdirAllBeneath(dirFd int, rel string, mode uint32) (int, error) {
	cur, err := unix.Openat(dirFd, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open .: %w", err)
	}
	done := ""
	for _, c := range splitPath(rel) {
		if c == ".." {
			unix.Close(cur)
			return -1, fmt.Errorf("mkdir %s: %w", rel, ErrUnsafePath)
		}
		done = joinRel(done, c)
		err := unix.Mkdirat(cur, c, mode)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			unix.Close(cur)
			return -1, fmt.Errorf("mkdir %s: %w", done, err)
		}
		created := err == nil
		unix.Close(cur)
		// Reopen from the root so that a component that already existed
		// as a symlink is followed only while it stays beneath dirFd.
		cur, err = openBeneath(dirFd, done, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return -1, fmt.Errorf("mkdir %s: %w", done, err)
		}
		// mkdirat's mode went through the umask: set the one asked for on
		// the directories made here (never on ones that existed), through
		// the descriptor's procfs link.
		if created {
			if err := unix.Chmod(fdPath(cur), mode); err != nil {
				unix.Close(cur)
				return -1, fmt.Errorf("chmod %s: %w", done, err)
			}
		}
	}
	return cur, nil
}

func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// fdPath is the procfs magic link of fd, usable as a mount(2) source or
// target so that the object checked through fd is the one mounted.
func fdPath(fd int) string {
	return "/proc/self/fd/" + strconv.Itoa(fd)
}

// sameFile reports whether two stat results name the same inode.
func sameFile(a, b *unix.Stat_t) bool {
	return a.Dev == b.Dev && a.Ino == b.Ino
}

// openDir opens an absolute directory path that comes from configuration
// (not from a manifest) as an O_PATH descriptor.
func openDir(p string) (int, error) {
	fd, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return fd, nil
}
