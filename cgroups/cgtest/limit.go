package cgtest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// SetMemoryLimit sets the hard memory limit of the sandbox (bytes > 0) and
// forbids swapping past it, so that a hog meets the limit and nothing else:
// on cgroup2 memory.max and memory.swap.max=0 (when the file exists); on v1
// memory.limit_in_bytes and, with swap accounting,
// memory.memsw.limit_in_bytes set to the same value.
func (s *Sandbox) SetMemoryLimit(bytes int64) error {
	if bytes <= 0 {
		return fmt.Errorf("set memory limit of sandbox %s: limit %d is not positive", s.rel, bytes)
	}
	if s.memory == nil {
		return fmt.Errorf("set memory limit of sandbox %s: no memory hierarchy", s.rel)
	}
	dir, v := s.memory.Path, strconv.FormatInt(bytes, 10)
	if s.memory.Hierarchy.V2() {
		if err := writeFile(filepath.Join(dir, "memory.max"), v); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("set memory limit of sandbox %s: %w (is memory enabled in the parent's cgroup.subtree_control?)", s.rel, err)
			}
			return fmt.Errorf("set memory limit of sandbox %s: %w", s.rel, err)
		}
		if err := writeIfExists(filepath.Join(dir, "memory.swap.max"), "0"); err != nil {
			return fmt.Errorf("set memory limit of sandbox %s: %w", s.rel, err)
		}
		return nil
	}
	limit := filepath.Join(dir, "memory.limit_in_bytes")
	memsw := filepath.Join(dir, "memory.memsw.limit_in_bytes")
	// The kernel keeps memsw >= limit: raising the limit above the
	// current memsw is EINVAL until memsw is raised first.
	err := writeFile(limit, v)
	if errors.Is(err, unix.EINVAL) {
		if err := writeIfExists(memsw, v); err != nil {
			return fmt.Errorf("set memory limit of sandbox %s: %w", s.rel, err)
		}
		err = writeFile(limit, v)
	}
	if err != nil {
		return fmt.Errorf("set memory limit of sandbox %s: %w", s.rel, err)
	}
	if err := writeIfExists(memsw, v); err != nil {
		return fmt.Errorf("set memory limit of sandbox %s: %w", s.rel, err)
	}
	return nil
}

// writeFile writes v to an existing cgroup file in one write.
func writeFile(name, v string) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(v)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", v, name, err)
	}
	return nil
}

func writeIfExists(name, v string) error {
	err := writeFile(name, v)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
