package cgroups

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// TaskCounter counts a cgroup's tasks over and over, as Tasks does, for a
// caller that asks every second: it keeps pids.current open and reads it
// with one pread, where Tasks resolves, opens, reads and closes each time.
// Where the cgroup has no pids.current it counts as Tasks does (the walk),
// keeping the memory directory's own thread list open to tell that the
// cgroup is still the one opened. A cgroup removed after OpenTaskCounter
// is an error matching fs.ErrNotExist (the kernel answers ENODEV on a
// kept file), also when a new cgroup has taken its path: the counter
// never reads another cgroup's count.
//
// A TaskCounter is not safe for concurrent use.
type TaskCounter struct {
	dirs []Dir
	path string // of the open file, for errors
	fd   int    // pids.current, or -1: none (the walk)
	// guard: for the walk, the memory directory's own thread list, read
	// to learn that the cgroup is still there (-1: none).
	guard int
	buf   [32]byte
}

// OpenTaskCounter opens the count of the cgroup whose directories in
// every hierarchy are dirs (Layout.Resolve).
func OpenTaskCounter(dirs []Dir) (*TaskCounter, error) {
	c := &TaskCounter{dirs: dirs, fd: -1, guard: -1}
	for _, d := range dirs {
		if d.Hierarchy == nil || (!d.Hierarchy.V2() && !d.Hierarchy.Has("pids")) {
			continue
		}
		p := filepath.Join(d.Path, FilePidsCurrent)
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			c.fd, c.path = fd, p
			return c, nil
		}
		// As Tasks: missing where pids is not delegated (a hybrid
		// host's cgroup2 directory) or from a cgroup that is gone,
		// which the walk tells.
		if !errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("count tasks: %w", &fs.PathError{Op: "open", Path: p, Err: err})
		}
	}
	if _, err := Tasks(dirs); err != nil {
		return nil, err
	}
	for _, d := range dirs {
		if d.Hierarchy == nil || !d.Hierarchy.Has("memory") {
			continue
		}
		for _, name := range []string{fileThreadsV2, fileTasksV1} {
			p := filepath.Join(d.Path, name)
			if fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
				c.guard, c.path = fd, p
				return c, nil
			}
		}
	}
	return c, nil
}

// Count returns the number of tasks now.
func (c *TaskCounter) Count() (int64, error) {
	if c.fd < 0 {
		if c.guard >= 0 {
			if _, err := c.pread(c.guard); err != nil {
				return 0, err
			}
		}
		return Tasks(c.dirs)
	}
	n, err := c.pread(c.fd)
	if err != nil {
		return 0, err
	}
	b := bytes.TrimSpace(c.buf[:n])
	v, perr := strconv.ParseInt(string(b), 10, 64)
	if perr != nil || v < 0 || n == len(c.buf) {
		return 0, fmt.Errorf("read %s: %w: %q is not a task count", c.path, ErrMalformed, b)
	}
	return v, nil
}

// pread reads the start of the kept file fd into c.buf (a thread list
// longer than the buffer is only read in part: the guard needs no more).
func (c *TaskCounter) pread(fd int) (int, error) {
	for {
		n, err := unix.Pread(fd, c.buf[:], 0)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.ENODEV:
			return 0, fmt.Errorf("count tasks: %w: %s was removed", fs.ErrNotExist, c.path)
		case err != nil:
			return 0, fmt.Errorf("count tasks: %w", &fs.PathError{Op: "read", Path: c.path, Err: err})
		}
		return n, nil
	}
}

// Close releases the kept files; the counter is not used after.
func (c *TaskCounter) Close() error {
	var err error
	for _, fd := range []*int{&c.fd, &c.guard} {
		if *fd >= 0 {
			err = errors.Join(err, unix.Close(*fd))
			*fd = -1
		}
	}
	c.dirs = nil
	return err
}
