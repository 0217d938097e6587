package cgtest

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups"
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
	limit := s.memory.Hierarchy.MemoryLimitFile()
	if s.memory.Hierarchy.V2() {
		if err := cgroups.WriteFile(dir, limit, v); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("set memory limit of sandbox %s: %w (is memory enabled in the parent's cgroup.subtree_control?)", s.rel, err)
			}
			return fmt.Errorf("set memory limit of sandbox %s: %w", s.rel, err)
		}
		if err := writeIfExists(dir, "memory.swap.max", "0"); err != nil {
			return fmt.Errorf("set memory limit of sandbox %s: %w", s.rel, err)
		}
		return nil
	}
	const memsw = "memory.memsw.limit_in_bytes"
	// The kernel keeps memsw >= limit: raising the limit above the
	// current memsw is EINVAL until memsw is raised first.
	err := cgroups.WriteFile(dir, limit, v)
	if errors.Is(err, unix.EINVAL) {
		if err := writeIfExists(dir, memsw, v); err != nil {
			return fmt.Errorf("set memory limit of sandbox %s: %w", s.rel, err)
		}
		err = cgroups.WriteFile(dir, limit, v)
	}
	if err != nil {
		return fmt.Errorf("set memory limit of sandbox %s: %w", s.rel, err)
	}
	if err := writeIfExists(dir, memsw, v); err != nil {
		return fmt.Errorf("set memory limit of sandbox %s: %w", s.rel, err)
	}
	return nil
}

// writeIfExists writes v to the cgroup file name in dir, and does nothing
// where the file does not exist (no swap accounting, no swap controller).
func writeIfExists(dir, name, v string) error {
	err := cgroups.WriteFile(dir, name, v)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
