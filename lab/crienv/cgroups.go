package crienv

import (
	"errors"
	"fmt"
	"time"

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
// Processes still inside are SIGKILLed first, through pidfds after a
// re-read of their cgroup.procs (cgroups.EmptyTree: they can only be the
// environment's containers, the tree is the environment's own), and waited
// for, at most killWait. A missing dir is not an error.
func removeCgroupTree(dir string) error {
	if err := cgroups.EmptyTree(dir, time.Now().Add(killWait)); err != nil {
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	return cgroups.RemoveTree(dir, time.Now().Add(rmdirWait))
}
