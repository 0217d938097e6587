package tripwire

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// fileProcs lists the processes of a cgroup (v1 and v2 alike), by pid in
// the reader's pid namespace.
const fileProcs = "cgroup.procs"

// Bounds of the search for the process beneath the watched directory. The
// pod root of a node is three levels deep down to the containers
// (kubepods/burstable/pod<uid>/<container>; with the systemd driver
// kubepods.slice/kubepods-burstable.slice/...-pod<uid>.slice/cri-....scope),
// and holds a few thousand cgroups at most (250 pods of a few containers
// each, plus their sandboxes).
const (
	selfMaxDepth = 8
	selfMaxDirs  = 1 << 16
)

// errSelfSearch reports a search that stopped at its bounds.
var errSelfSearch = errors.New("too many cgroups to search")

// processBeneath finds the cgroup of pid at or beneath the directory dirfd
// (dir), by the pids in each cgroup.procs. It is how the working-set
// assist tells that memory.high on dir would throttle the process that
// runs it: guard mode's own pod is beneath kubepods, and in a container
// with a cgroup namespace of its own /proc/self/cgroup reads "/", which
// names nothing on the host's tree, while cgroup.procs lists pids in the
// reader's pid namespace, where the process's own pid is its own. where is
// the cgroup's path relative to dir ("." for dir itself). Cgroups removed
// during the search are skipped; any other failure is returned.
func processBeneath(dirfd int, dir string, pid int) (where string, found bool, err error) {
	fd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", false, fmt.Errorf("open %s: %w", dir, err)
	}
	dirs := 0
	return searchProcs(fd, dir, ".", pid, 0, &dirs)
}

// searchProcs searches the cgroup fd (dir/rel), which it closes, and its
// children.
func searchProcs(fd int, dir, rel string, pid, depth int, dirs *int) (string, bool, error) {
	d := os.NewFile(uintptr(fd), dir+"/"+rel)
	defer d.Close()
	if *dirs++; *dirs > selfMaxDirs {
		return "", false, fmt.Errorf("search %s for pid %d: %w: more than %d", dir, pid, errSelfSearch, selfMaxDirs)
	}
	in, err := procsHold(fd, dir, rel, pid)
	if err != nil || in {
		return rel, in, err
	}
	if depth == selfMaxDepth {
		return "", false, nil
	}
	entries, err := d.ReadDir(-1)
	if err != nil {
		if removed(err) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("list %s/%s: %w", dir, rel, err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue // a cgroup file: kernfs gives each entry's type
		}
		name := e.Name()
		cfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) || removed(err) {
				continue // a cgroup file, or a cgroup removed meanwhile
			}
			return "", false, fmt.Errorf("open %s/%s/%s: %w", dir, rel, name, err)
		}
		child := name
		if rel != "." {
			child = rel + "/" + name
		}
		if where, in, err := searchProcs(cfd, dir, child, pid, depth+1, dirs); err != nil || in {
			return where, in, err
		}
	}
	return "", false, nil
}

// procsHold tells whether the cgroup.procs beneath fd lists pid; a
// directory without one (not a cgroup, or removed) lists nothing.
func procsHold(fd int, dir, rel string, pid int) (bool, error) {
	pfd, err := unix.Openat(fd, fileProcs, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if removed(err) {
			return false, nil
		}
		return false, fmt.Errorf("open %s/%s/%s: %w", dir, rel, fileProcs, err)
	}
	f := os.NewFile(uintptr(pfd), dir+"/"+rel+"/"+fileProcs)
	defer f.Close()
	want := strconv.Itoa(pid)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if sc.Text() == want {
			return true, nil
		}
	}
	if err := sc.Err(); err != nil && !removed(err) {
		return false, fmt.Errorf("read %s: %w", f.Name(), err)
	}
	return false, nil
}

// removed tells whether err is a cgroup (or its file) going away: ENOENT,
// or ENODEV from a file of a cgroup removed while open.
func removed(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV)
}
