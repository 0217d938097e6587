package cgroups

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Files that count a cgroup's tasks.
const (
	// FilePidsCurrent is the pids controller's count of the tasks in a
	// cgroup and every cgroup beneath it (v1 and cgroup2).
	FilePidsCurrent = "pids.current"
	fileTasksV1     = "tasks"          // v1: the thread ids in the cgroup itself
	fileThreadsV2   = "cgroup.threads" // cgroup2: the same
)

// Tasks counts the tasks (threads, what pids.max limits and what the
// node's pid.available counts) in a cgroup and every cgroup beneath it,
// given its directories in every hierarchy (Layout.Resolve). It reads
// pids.current where the pids controller is: the v1 pids hierarchy, or
// the cgroup2 directory when pids is enabled there. Where it is not (no
// pids hierarchy mounted, or cgroup2 without pids delegated) it counts
// the thread ids listed beneath the memory directory instead, a walk that
// costs one read per cgroup. A cgroup that is gone is an error matching
// fs.ErrNotExist; no count is ever made up.
func Tasks(dirs []Dir) (int64, error) {
	var mem string
	for _, d := range dirs {
		if d.Hierarchy == nil {
			continue
		}
		if d.Hierarchy.Has("memory") {
			mem = d.Path
		}
		if !d.Hierarchy.V2() && !d.Hierarchy.Has("pids") {
			continue
		}
		n, err := pidsCurrent(d.Path)
		if err == nil {
			return n, nil
		}
		// pids.current is missing from a cgroup2 directory whose parent
		// does not delegate pids (a hybrid host's), from a root, and
		// from a cgroup that is gone, which the walk below tells.
		// Any other failure is the answer.
		if !errors.Is(err, fs.ErrNotExist) {
			return 0, err
		}
	}
	if mem == "" {
		return 0, fmt.Errorf("count tasks: %w: none of %d directories is in the memory or pids hierarchy", ErrUnsupported, len(dirs))
	}
	return TreeThreads(mem)
}

func pidsCurrent(dir string) (int64, error) {
	p := filepath.Join(dir, FilePidsCurrent)
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", p, err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("read %s: %w: %q is not a task count", p, ErrMalformed, bytes.TrimSpace(b))
	}
	return n, nil
}

// TreeThreads counts the thread ids listed in dir and every cgroup beneath
// it ("tasks" on v1, "cgroup.threads" on cgroup2). Cgroups removed while
// it walks are skipped; dir itself gone is an error matching
// fs.ErrNotExist.
func TreeThreads(dir string) (int64, error) {
	var n int64
	err := Walk(dir, func(p string) error {
		b, err := os.ReadFile(filepath.Join(p, fileThreadsV2))
		if errors.Is(err, fs.ErrNotExist) {
			b, err = os.ReadFile(filepath.Join(p, fileTasksV1))
		}
		switch {
		case err == nil:
			n += int64(bytes.Count(b, []byte{'\n'}))
		case !Gone(err):
			return fmt.Errorf("count the tasks of %s: %w", p, err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
