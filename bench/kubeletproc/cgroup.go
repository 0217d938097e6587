package kubeletproc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/lab/crienv"
)

// Bounds of the cgroup removals.
const (
	// emptyWait bounds the wait for processes left in a tree to leave it
	// after SIGKILL (they leave within milliseconds).
	emptyWait = 10 * time.Second
	// rmdirWait bounds the retries of a busy empty cgroup: the kernel frees
	// a cgroup a few milliseconds after its last task has exited.
	rmdirWait = 5 * time.Second
)

// rootSuffix is the last component of the kubelet's cgroup root beneath
// the runtime environment's cgroup parent.
const rootSuffix = "kubelet"

// CgroupRoot is an absolute cgroupfs path that exists in every mounted
// cgroup hierarchy, made for the kubelet's cgroupRoot: beneath this
// process's own memory cgroup, and at the same absolute path in the other
// hierarchies (the kubelet's cgroupfs driver uses one path for all). It
// records the directories it made, so that Remove takes away those and
// nothing else.
type CgroupRoot struct {
	path   string
	layout *cgroups.Layout
	// made are the directories made here, in the order made (parents
	// first), in every hierarchy.
	made []string
}

// NewCgroupRoot makes the cgroup root for a kubelet on env's runtime:
// <this process's memory cgroup>/<env.CgroupParent()>/kubelet, in every
// mounted hierarchy. Remove it after the kubelet has stopped and its pods
// are gone (Kubelet.Close sees to both).
func NewCgroupRoot(env *crienv.Env) (*CgroupRoot, error) {
	l, err := cgroups.Discover()
	if err != nil {
		return nil, fmt.Errorf("make the kubelet's cgroup root: %w", err)
	}
	return makeCgroupRoot(l, env.CgroupParent()+"/"+rootSuffix)
}

// makeCgroupRoot makes rel (relative to this process's memory cgroup) at
// its absolute path in every hierarchy of l. On error, what it made is
// removed again.
func makeCgroupRoot(l *cgroups.Layout, rel string) (_ *CgroupRoot, retErr error) {
	if l.Memory == nil {
		return nil, fmt.Errorf("make the kubelet's cgroup root: %w: no hierarchy has the memory controller", cgroups.ErrUnsupported)
	}
	if strings.HasPrefix(rel, "/") {
		return nil, fmt.Errorf("make the kubelet's cgroup root %q: %w: want a path relative to this process's memory cgroup", rel, cgroups.ErrInvalidPath)
	}
	own, err := l.Memory.Resolve(rel)
	if err != nil {
		return nil, fmt.Errorf("make the kubelet's cgroup root: %w", err)
	}
	r := &CgroupRoot{path: own.Rel, layout: l}
	dirs, err := l.Resolve(r.path)
	if err != nil {
		return nil, fmt.Errorf("make the kubelet's cgroup root %s: %w", r.path, err)
	}
	defer func() {
		if retErr != nil {
			retErr = errors.Join(retErr, r.Remove())
		}
	}()
	for _, d := range dirs {
		if err := r.mkdirAll(d); err != nil {
			return nil, fmt.Errorf("make the kubelet's cgroup root %s: %w", r.path, err)
		}
	}
	return r, nil
}

// mkdirAll makes d and its missing parents below the hierarchy's mount,
// recording each one made.
func (r *CgroupRoot) mkdirAll(d cgroups.Dir) error {
	p := d.Hierarchy.Mount
	for _, c := range strings.Split(strings.TrimPrefix(strings.TrimPrefix(d.Path, d.Hierarchy.Mount), "/"), "/") {
		p = filepath.Join(p, c)
		err := os.Mkdir(p, 0o755)
		switch {
		case err == nil:
			r.made = append(r.made, p)
		case errors.Is(err, os.ErrExist):
		default:
			return err
		}
	}
	return nil
}

// Path is the absolute cgroup path, the kubelet's cgroupRoot.
func (r *CgroupRoot) Path() string { return r.path }

// Dirs are the root's directories, one per hierarchy.
func (r *CgroupRoot) Dirs() ([]string, error) { return rootDirs(r.layout, r.path) }

// Remove removes the root's tree in every hierarchy (processes still in it
// are killed first: only the kubelet's pods can be there), then every
// parent directory it made, deepest first. A parent that someone else has
// put a cgroup beneath meanwhile is left to them. Removing twice does
// nothing.
func (r *CgroupRoot) Remove() error {
	var errs []error
	dirs, err := r.Dirs()
	if err != nil {
		return fmt.Errorf("remove the kubelet's cgroup root %s: %w", r.path, err)
	}
	for _, d := range dirs {
		if err := removeTree(d); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		// Parents of a tree that stays cannot go either.
		return fmt.Errorf("remove the kubelet's cgroup root: %w", errors.Join(errs...))
	}
	for i := len(r.made) - 1; i >= 0; i-- {
		if err := rmdirUnlessShared(r.made[i]); err != nil {
			errs = append(errs, err)
		}
	}
	r.made = nil
	if len(errs) > 0 {
		return fmt.Errorf("remove the kubelet's cgroup root: %w", errors.Join(errs...))
	}
	return nil
}

// rootDirs resolves the absolute cgroup path p in every hierarchy of l.
func rootDirs(l *cgroups.Layout, p string) ([]string, error) {
	ds, err := l.Resolve(p)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Path
	}
	return out, nil
}

// removeTree empties the cgroup dir (SIGKILL to what is left) and removes
// it with everything beneath it. A dir already gone is not an error.
func removeTree(dir string) error {
	if err := cgroups.EmptyTree(dir, time.Now().Add(emptyWait)); err != nil {
		return err
	}
	return cgroups.RemoveTree(dir, time.Now().Add(rmdirWait))
}

// rmdirUnlessShared removes the empty cgroup dir made here, unless
// another cgroup is beneath it now (a second run's root beside ours): then
// it is left for that one's owner.
func rmdirUnlessShared(dir string) error {
	err := unix.Rmdir(dir)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.ENOTEMPTY) {
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	if shared, serr := hasSubdir(dir); serr == nil && shared {
		return nil
	}
	return cgroups.Rmdir(dir, time.Now().Add(rmdirWait))
}

// hasSubdir reports whether dir has a directory beneath it.
func hasSubdir(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		if e.IsDir() {
			return true, nil
		}
	}
	return false, nil
}
