package crienv

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups"
)

// rmdirWait bounds how long removeCgroupTree retries a cgroup that is still
// busy: the kernel frees a cgroup a few milliseconds after its last task
// exits.
const rmdirWait = 3 * time.Second

// cgroupDirs returns rel's directory in every hierarchy of l that shows it
// (this process's cgroup is visible under the mount). rel is relative to
// this process's own cgroups.
func cgroupDirs(l *cgroups.Layout, rel string) ([]string, error) {
	var out []string
	for i := range l.Hierarchies {
		d, err := l.Hierarchies[i].Resolve(rel)
		if errors.Is(err, cgroups.ErrUnsupported) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, d.Path)
	}
	return out, nil
}

// removeCgroupTree removes dir and every cgroup beneath it, children first.
// Processes still inside are SIGKILLed through pidfds first (they can only
// be the environment's containers: the tree is the environment's own). A
// missing dir is not an error.
func removeCgroupTree(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	pids, err := cgroupProcs(dir)
	if err != nil {
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	var errs []error
	for _, pid := range pids {
		if err := killInCgroup(pid, dir); err != nil {
			errs = append(errs, err)
		}
	}
	var dirs []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	// Deepest first.
	sort.SliceStable(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
	for _, d := range dirs {
		if err := rmdirRetry(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// killInCgroup SIGKILLs pid through a pidfd if, through that pidfd's
// lifetime, it is still in a cgroup beneath dir, and waits for it to exit.
func killInCgroup(pid int, dir string) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kill pid %d in %s: pidfd_open: %w", pid, dir, err)
	}
	defer unix.Close(fd)
	procs, err := cgroupProcs(dir)
	if err != nil {
		return fmt.Errorf("kill pid %d in %s: %w", pid, dir, err)
	}
	found := false
	for _, p := range procs {
		found = found || p == pid
	}
	if !found {
		return nil
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill pid %d in %s: %w", pid, dir, err)
	}
	if err := waitPidfd(fd, killWait); err != nil {
		return fmt.Errorf("kill pid %d in %s: %w", pid, dir, err)
	}
	return nil
}

// rmdirRetry removes the cgroup directory d, retrying EBUSY for rmdirWait.
func rmdirRetry(d string) error {
	deadline := time.Now().Add(rmdirWait)
	for {
		err := unix.Rmdir(d)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", d, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
