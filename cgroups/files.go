package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Files every user of the cgroup tree reads or writes. Names are fixed and
// joined to a directory this package or its caller resolved, never taken
// from input.
const (
	FileProcs          = "cgroup.procs"
	FileKill           = "cgroup.kill"
	FileControllers    = "cgroup.controllers"
	FileSubtreeControl = "cgroup.subtree_control"
	// FileMemoryMax and FileMemoryLimitV1 hold a memory cgroup's hard
	// limit on cgroup2 and on v1; Hierarchy.MemoryLimitFile picks one.
	FileMemoryMax     = "memory.max"
	FileMemoryLimitV1 = "memory.limit_in_bytes"
)

// MemoryLimitFile names the file of h's memory cgroups that holds their
// hard limit: memory.max on cgroup2, memory.limit_in_bytes on v1.
func (h *Hierarchy) MemoryLimitFile() string {
	if h.V2() {
		return FileMemoryMax
	}
	return FileMemoryLimitV1
}

// WriteFile writes v to the cgroup file name in dir, as the kernel wants
// it: one write(2) on a descriptor opened O_WRONLY|O_TRUNC. The error
// names the file and the value.
func WriteFile(dir, name, v string) error {
	p := filepath.Join(dir, name)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", v, p, err)
	}
	_, err = f.WriteString(v)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", v, p, err)
	}
	return nil
}

// Procs reads the pids directly in the cgroup directory dir (its
// cgroup.procs; not its children's).
func Procs(dir string) ([]int, error) {
	p := filepath.Join(dir, FileProcs)
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("read %s: %w: %q is not a pid", p, ErrMalformed, f)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// TreeProcs lists the pids in dir and every cgroup beneath it. Cgroups
// removed while it walks are skipped.
//
// A cgroup.procs that cannot be read for another reason is an error, never
// "no process": callers decide from it whether a cgroup may be removed.
func TreeProcs(dir string) ([]int, error) {
	var all []int
	err := Walk(dir, func(p string) error {
		pids, err := Procs(p)
		switch {
		case err == nil:
			all = append(all, pids...)
		case !Gone(err):
			return err
		}
		return nil
	})
	return all, err
}

// Populated reports whether the cgroup directory dir or any cgroup beneath
// it holds a process: cgroup.events' "populated" on cgroup2 (one read, kept
// by the kernel for the whole subtree), a walk of cgroup.procs on v1.
func Populated(dir string, v2 bool) (bool, error) {
	if v2 {
		p := filepath.Join(dir, "cgroup.events")
		b, err := os.ReadFile(p)
		if err != nil {
			return false, fmt.Errorf("read %s: %w", p, err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "populated "); ok {
				return v != "0", nil
			}
		}
		return false, fmt.Errorf("read %s: %w: no populated line", p, ErrMalformed)
	}
	pids, err := TreeProcs(dir)
	return len(pids) > 0, err
}

// ErrPopulated reports a cgroup that still has processes, so that it cannot
// be removed.
var ErrPopulated = errors.New("cgroup still has processes")

// removeRetryEvery is how often Rmdir retries EBUSY on an empty cgroup:
// the kernel frees a cgroup a few milliseconds after its last task exits.
const removeRetryEvery = 20 * time.Millisecond

// Rmdir removes the cgroup directory p, which must have no children. A
// directory already gone is not an error. EBUSY from a cgroup whose
// cgroup.procs is empty (a dying task still charged to it) is retried
// until deadline; EBUSY from one with processes fails at once with
// ErrPopulated, naming them.
func Rmdir(p string, deadline time.Time) error {
	for {
		err := unix.Rmdir(p)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("remove cgroup %s: %w", p, err)
		}
		if pids, perr := Procs(p); perr == nil && len(pids) > 0 {
			return fmt.Errorf("remove cgroup %s: %w (pids %v)", p, ErrPopulated, pids)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w (no process left; still busy after the wait)", p, err)
		}
		time.Sleep(removeRetryEvery)
	}
}

// RemoveTree removes dir and every cgroup beneath it, deepest first,
// retrying busy empty ones until deadline (see Rmdir). It stops at the
// first directory it cannot remove, since its parents cannot go either.
// A dir already gone is not an error.
func RemoveTree(dir string, deadline time.Time) error {
	var all []string
	err := Walk(dir, func(p string) error {
		all = append(all, p)
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for i := len(all) - 1; i >= 0; i-- {
		if err := Rmdir(all[i], deadline); err != nil {
			return err
		}
	}
	return nil
}

// killRounds bounds SigkillTree's walks: each round signals the pids it
// has not signalled yet (tasks forked meanwhile); a fork bomb outrunning
// ten walks is left to cgroup.kill or the pids limit.
const killRounds = 10

// SigkillTree sends SIGKILL to every process in cgroup.procs at and
// beneath root, walking again while it finds pids it has not signalled
// yet, a bounded number of times, and returns how many it signalled. It
// is the v1 (and pre-5.14) stand-in for cgroup.kill, and it does not wait
// for the processes to exit (EmptyTree does).
//
// Only processes inside the tree are hit, even when a pid is recycled: each
// pid read from a cgroup.procs is pinned with a pidfd, that cgroup.procs is
// read again, and the pidfd is signalled only if the pid is still listed
// (a pid listed both before and after its pidfd was opened is the process
// in the cgroup, not a newcomer elsewhere that got its number). A kernel
// without pidfd_open (before 5.3) gets kill(2) after the same re-read.
// Cgroups removed while it walks are skipped; failures to signal are
// returned, joined, after every other process has been signalled.
func SigkillTree(root string) (int, error) { return sigkillTree(root, Procs) }

// sigkillTree is SigkillTree reading cgroup.procs through procs, so that
// tests can show it a pid that leaves between the two reads.
func sigkillTree(root string, procs func(string) ([]int, error)) (int, error) {
	signalled := map[int]bool{}
	var errs []error
	for round := 0; round < killRounds; round++ {
		fresh := 0
		err := Walk(root, func(p string) error {
			n, err := sigkillProcs(p, procs, signalled)
			fresh += n
			if err != nil {
				errs = append(errs, err)
			}
			return nil
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			break
		}
		if fresh == 0 {
			break
		}
	}
	return len(signalled), errors.Join(errs...)
}

// sigkillProcs SIGKILLs the processes listed in dir's cgroup.procs that
// are not in done, through pidfds opened before a second read of the file
// (see SigkillTree), adds those it signalled to done and returns how many
// they were. A cgroup already removed has none.
func sigkillProcs(dir string, procs func(string) ([]int, error), done map[int]bool) (int, error) {
	pids, err := procs(dir)
	if err != nil {
		if Gone(err) {
			return 0, nil
		}
		return 0, fmt.Errorf("kill in cgroup %s: %w", dir, err)
	}
	pinned := make(map[int]int, len(pids)) // pid -> pidfd; -1: no pidfd_open here
	defer func() {
		for _, fd := range pinned {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}()
	var errs []error
	for _, pid := range pids {
		if _, ok := pinned[pid]; ok || done[pid] {
			continue
		}
		fd, err := unix.PidfdOpen(pid, 0)
		switch {
		case err == nil:
			pinned[pid] = fd
		case errors.Is(err, unix.ESRCH):
			// Exited already.
		case errors.Is(err, unix.ENOSYS):
			pinned[pid] = -1
		default:
			errs = append(errs, fmt.Errorf("kill pid %d in cgroup %s: pidfd_open: %w", pid, dir, err))
		}
	}
	if len(pinned) == 0 {
		return 0, errors.Join(errs...)
	}
	still, err := procs(dir)
	if err != nil {
		if Gone(err) {
			return 0, errors.Join(errs...)
		}
		return 0, errors.Join(append(errs, fmt.Errorf("kill in cgroup %s: %w", dir, err))...)
	}
	n := 0
	for _, pid := range still {
		fd, ok := pinned[pid]
		if !ok || done[pid] {
			continue // listed only now (forked or moved in): the next round's
		}
		if fd >= 0 {
			err = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		} else {
			err = unix.Kill(pid, unix.SIGKILL)
		}
		done[pid] = true
		switch {
		case err == nil:
			n++
		case errors.Is(err, unix.ESRCH):
			// Exited between the read and the signal.
		default:
			errs = append(errs, fmt.Errorf("kill pid %d in cgroup %s: %w", pid, dir, err))
		}
	}
	return n, errors.Join(errs...)
}

// emptyEvery is how often EmptyTree looks again for killed processes that
// have not left yet: SIGKILLed processes normally leave their cgroup
// within milliseconds.
const emptyEvery = 10 * time.Millisecond

// EmptyTree kills every process at and beneath dir (SigkillTree, again on
// each look) and waits until cgroup.procs lists none anywhere in the tree,
// at most until deadline; then it fails with ErrPopulated naming the pids
// still there. A dir already gone is empty. It is for cgroups that are
// ours to end (a test's sandbox, a test runtime's leftovers), before
// RemoveTree.
func EmptyTree(dir string, deadline time.Time) error {
	for {
		pids, err := TreeProcs(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("empty cgroup %s: %w", dir, err)
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("empty cgroup %s: %w (pids %v are still there after SIGKILL)", dir, ErrPopulated, pids)
		}
		if _, err := SigkillTree(dir); err != nil {
			return fmt.Errorf("empty cgroup %s: %w", dir, err)
		}
		time.Sleep(emptyEvery)
	}
}

// Kill ends every process in the cgroup directory dir and beneath it:
// with cgroup.kill where dir is a cgroup2 directory that has it (5.14+;
// atomic, new forks included), which returns 0; otherwise with
// SigkillTree, which returns how many processes it signalled.
func Kill(dir string, v2 bool) (int, error) {
	if v2 {
		if err := WriteFile(dir, FileKill, "1"); err == nil {
			return 0, nil
		}
	}
	return SigkillTree(dir)
}

// EnableControllers writes to dir's cgroup.subtree_control the controllers
// of want that dir has (cgroup.controllers) and has not enabled yet, so
// that its children get their interface files. It returns nil when there
// is nothing to enable. On a cgroup that holds processes the kernel
// refuses (EBUSY: the no-internal-process rule), except at the root.
func EnableControllers(dir string, want ...string) error {
	avail, err := Controllers(dir)
	if err != nil {
		return fmt.Errorf("enable controllers below %s: %w", dir, err)
	}
	have, err := os.ReadFile(filepath.Join(dir, FileSubtreeControl))
	if err != nil {
		return fmt.Errorf("enable controllers below %s: %w", dir, err)
	}
	enabled := strings.Fields(string(have))
	var add []string
	for _, c := range avail {
		if slices.Contains(want, c) && !slices.Contains(enabled, c) {
			add = append(add, "+"+c)
		}
	}
	if len(add) == 0 {
		return nil
	}
	return WriteFile(dir, FileSubtreeControl, strings.Join(add, " "))
}

// Controllers lists the controllers that the cgroup2 directory dir has
// (its cgroup.controllers): those its parent delegates to it, which it can
// in turn enable for its children.
func Controllers(dir string) ([]string, error) {
	p := filepath.Join(dir, FileControllers)
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	return strings.Fields(string(b)), nil
}
