package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ID returns the cgroup id of the cgroup directory dir: its kernfs node id,
// which is the directory's inode number. It equals what the kernel reports
// as the id of cgroup_mkdir, bpf_get_current_cgroup_id() (cgroup2) and
// task->cgroups->subsys[memory_cgrp_id]->cgroup->kn->id (v1 memory). It
// fails with ErrNotCgroup when dir is not on a cgroup or cgroup2
// filesystem, because an inode number from elsewhere is not a cgroup id.
func ID(dir string) (uint64, error) {
	// One open, then fstatfs and fstat on the same descriptor, so the
	// filesystem check and the inode belong to the same directory even if
	// the path is removed and recreated meanwhile.
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("cgroup id: %w", &fs.PathError{Op: "open", Path: dir, Err: err})
	}
	defer unix.Close(fd)
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return 0, fmt.Errorf("cgroup id of %s: fstatfs: %w", dir, err)
	}
	if sfs.Type != unix.CGROUP_SUPER_MAGIC && sfs.Type != unix.CGROUP2_SUPER_MAGIC {
		return 0, fmt.Errorf("cgroup id of %s: %w (filesystem magic %#x)", dir, ErrNotCgroup, sfs.Type)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, fmt.Errorf("cgroup id of %s: fstat: %w", dir, err)
	}
	return st.Ino, nil
}

// Walk calls fn for dir and then for every directory beneath it, parents
// before children, siblings in lexical order. A symbolic link to dir itself
// is followed; links beneath it are not. Cgroup directories come and go
// while Walk runs: one that is gone by the time Walk lists it is skipped
// silently, and fn must itself tolerate a directory that vanishes after it
// was listed. dir itself must exist when Walk starts.
//
// If fn returns fs.SkipDir, Walk does not descend into that directory; if it
// returns fs.SkipAll, Walk stops and returns nil. Any other error stops the
// walk and is returned as is.
func Walk(dir string, fn func(path string) error) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("walk cgroup %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("walk cgroup %s: %w", dir, &fs.PathError{Op: "walk", Path: dir, Err: unix.ENOTDIR})
	}
	err = walk(dir, fn)
	if errors.Is(err, fs.SkipAll) {
		return nil
	}
	return err
}

func walk(dir string, fn func(string) error) error {
	// List before calling fn, so that a directory already gone is not
	// reported at all.
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed since its parent was listed
		}
		return fmt.Errorf("walk cgroup: %w", err)
	}
	if err := fn(dir); err != nil {
		if errors.Is(err, fs.SkipDir) {
			return nil
		}
		return err
	}
	for _, e := range entries {
		// Type() comes from the directory entry itself (lstat semantics),
		// so a symbolic link is never taken for a directory.
		if !e.Type().IsDir() {
			continue
		}
		child := filepath.Join(dir, e.Name())
		if leaf, gone := leafDir(child); gone {
			continue // removed since dir was listed
		} else if leaf {
			// No cgroup beneath it: nothing to list. A pod's container
			// cgroups are most of a node's, and each lists dozens of
			// files.
			if err := fn(child); err != nil && !errors.Is(err, fs.SkipDir) {
				return err
			}
			continue
		}
		if err := walk(child, fn); err != nil {
			return err
		}
	}
	return nil
}

// leafDir reports whether the cgroup directory dir has no subdirectory,
// from its link count alone (one lstat, where listing it reads every
// control file's name): kernfs, which both cgroup file systems are, keeps
// a directory's at 2 + its subdirectories, as ext4 and tmpfs do. A file
// system that does not (btrfs keeps 1) is listed as before. gone: dir is
// no longer there.
func leafDir(dir string) (leaf, gone bool) {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return false, errors.Is(err, unix.ENOENT)
	}
	return st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Nlink == 2, false
}
