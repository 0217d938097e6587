package loader

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cilium/ebpf"
)

// CgroupKey names a cgroup: ids are unique only within one hierarchy, and
// hierarchy 0 is cgroup2.
type CgroupKey struct {
	ID          uint64
	HierarchyID uint32
	_           uint32
}

// Monitor adds cgroups to the monitored set.
func (p *Pipeline) Monitor(keys ...CgroupKey) error {
	m := p.maps["monitored_cgroups"]
	for _, k := range keys {
		if err := m.Update(k, uint8(1), ebpf.UpdateAny); err != nil {
			return fmt.Errorf("monitor cgroup %d in hierarchy %d: %w", k.ID, k.HierarchyID, err)
		}
	}
	return nil
}

// Unmonitor removes cgroups from the monitored set; absent keys are fine.
func (p *Pipeline) Unmonitor(keys ...CgroupKey) error {
	m := p.maps["monitored_cgroups"]
	for _, k := range keys {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("unmonitor cgroup %d in hierarchy %d: %w", k.ID, k.HierarchyID, err)
		}
	}
	return nil
}

// Monitored reports whether a cgroup is in the monitored set.
func (p *Pipeline) Monitored(k CgroupKey) (bool, error) {
	var v uint8
	err := p.maps["monitored_cgroups"].Lookup(k, &v)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ebpf.ErrKeyNotExist):
		return false, nil
	}
	return false, fmt.Errorf("look up monitored cgroup %d: %w", k.ID, err)
}

// MonitorTree monitors the cgroup directory dir (a filesystem path in the
// hierarchy with the given id) and every cgroup beneath it. rel is dir's
// path within its hierarchy ("/a/b"), which the classic-tracepoint mkdir
// fallback matches new cgroups against. Directories that vanish during the
// walk are skipped. It returns how many cgroups were added.
//
// The subtree root is added first and its children after, so a cgroup made
// during the walk is caught either by the walk or by the mkdir hook.
func (p *Pipeline) MonitorTree(hierarchyID uint32, dir, rel string) (int, error) {
	if err := p.addPrefix(hierarchyID, rel); err != nil {
		return 0, err
	}
	n := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path != dir {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		id, err := inode(path)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path != dir {
				return fs.SkipDir
			}
			return err
		}
		if err := p.Monitor(CgroupKey{ID: id, HierarchyID: hierarchyID}); err != nil {
			return err
		}
		n++
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("monitor cgroup tree %s: %w", dir, err)
	}
	return n, nil
}

func inode(path string) (uint64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("stat %s: no inode", path)
	}
	return st.Ino, nil
}

func (p *Pipeline) addPrefix(hier uint32, rel string) error {
	rel = "/" + strings.Trim(rel, "/")
	if len(rel) >= 256 {
		return fmt.Errorf("monitor cgroup path %q: longer than 255 bytes", rel)
	}
	p.setMu.Lock()
	defer p.setMu.Unlock()
	for _, pr := range p.prefixes {
		if pr.HierarchyID == hier && string(pr.Path[:pr.Len]) == rel {
			return nil
		}
	}
	if len(p.prefixes) >= 4 {
		return fmt.Errorf("monitor cgroup path %q: at most 4 subtree roots", rel)
	}
	var pr prefix
	pr.HierarchyID = hier
	pr.Len = uint32(len(rel))
	copy(pr.Path[:], rel)
	m := p.maps["monitored_prefixes"]
	if err := m.Update(uint32(len(p.prefixes)), pr, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("monitor cgroup path %q: %w", rel, err)
	}
	p.prefixes = append(p.prefixes, pr)
	return nil
}
