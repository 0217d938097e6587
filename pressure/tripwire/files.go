package tripwire

import (
	"errors"
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"
)

// openDir opens dir for openat. A missing dir matches fs.ErrNotExist.
func openDir(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", dir, err) // ENOENT matches fs.ErrNotExist
	}
	return fd, nil
}

// openAt opens the fixed name beneath dirfd. A missing file matches
// ErrUnsupported (and fs.ErrNotExist): the directory is not a memory
// cgroup of the asked version.
func openAt(dirfd int, dir, name string, flags int) (int, error) {
	fd, err := unix.Openat(dirfd, name, flags|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if errors.Is(err, unix.ENOENT) {
		return -1, fmt.Errorf("open %s/%s: %w: %w", dir, name, ErrUnsupported, fs.ErrNotExist)
	}
	if err != nil {
		return -1, fmt.Errorf("open %s/%s: %w", dir, name, err)
	}
	return fd, nil
}

// pread reads the whole (small) cgroup file fd into buf from offset 0.
func pread(fd int, buf []byte) ([]byte, error) {
	n := 0
	for {
		m, err := unix.Pread(fd, buf[n:], int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if m == 0 {
			return buf[:n], nil
		}
		n += m
		if n == len(buf) {
			return nil, fmt.Errorf("%w: more than %d bytes", ErrMalformed, len(buf))
		}
	}
}

// writeValue writes v to name beneath dirfd in one write. O_NONBLOCK asks
// kernels that support it to skip the synchronous reclaim of memory.high.
func writeValue(dirfd int, dir, name, v string) error {
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_TRUNC|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("write %q to %s/%s: %w", v, dir, name, err)
	}
	for {
		_, err = unix.Write(fd, []byte(v))
		if err != unix.EINTR {
			break
		}
	}
	cerr := unix.Close(fd)
	if err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %q to %s/%s: %w", v, dir, name, err)
	}
	return nil
}
