package cgroups

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
)

// Host files that discovery reads, as absolute paths.
const (
	mountinfoFile  = "/proc/self/mountinfo"
	selfCgroupFile = "/proc/self/cgroup"
)

// Hierarchy is one mounted cgroup hierarchy and this process's place in it.
type Hierarchy struct {
	// ID is the hierarchy id from the first column of /proc/self/cgroup;
	// 0 is the cgroup2 hierarchy. The kernel's cgroup tracepoints report
	// the same number.
	ID uint32
	// Controllers are the controllers bound to the hierarchy. For v1 they
	// come from /proc/self/cgroup and include named hierarchies spelled
	// "name=x"; for cgroup2 they come from cgroup.controllers at the
	// mount's root.
	Controllers []string
	// Mount is the mount point, e.g. /sys/fs/cgroup/memory.
	Mount string
	// Root is the mount's root within the hierarchy (mountinfo field 4):
	// "/" unless only a subtree is mounted, as in containers.
	Root string
	// Own is this process's cgroup path within the hierarchy, from
	// /proc/self/cgroup.
	Own string
}

// V2 reports whether h is the cgroup2 hierarchy.
func (h *Hierarchy) V2() bool { return h.ID == 0 }

// Has reports whether controller c (e.g. "memory" or "name=systemd") is
// bound to h.
func (h *Hierarchy) Has(c string) bool { return slices.Contains(h.Controllers, c) }

// OwnDir returns the filesystem path of this process's cgroup in h: Mount
// joined with Own taken relative to Root. It returns "" when Own is not
// beneath Root, that is when this process's cgroup is not visible under the
// mount.
func (h *Hierarchy) OwnDir() string {
	rest, ok := within(h.Own, h.Root)
	if !ok {
		return ""
	}
	return h.Mount + rest
}

// within returns the part of hierarchy path p below root ("" or "/..."),
// and whether p is root itself or beneath it. Both are clean absolute paths.
func within(p, root string) (string, bool) {
	if root == "/" {
		if p == "/" {
			return "", true
		}
		return p, true
	}
	if p == root {
		return "", true
	}
	if strings.HasPrefix(p, root) && p[len(root)] == '/' {
		return p[len(root):], true
	}
	return "", false
}

// Layout is the host's cgroup arrangement as seen by this process.
type Layout struct {
	// Mode is ModeV2 with only a cgroup2 hierarchy mounted, ModeV1 with
	// only v1 hierarchies, ModeHybrid with both.
	Mode Mode
	// Hierarchies are the mounted hierarchies this process belongs to,
	// ordered by ID (so the cgroup2 hierarchy, when mounted, is first).
	Hierarchies []Hierarchy
	// Unified is the cgroup2 hierarchy, nil when none is mounted.
	Unified *Hierarchy
	// Memory is the hierarchy that holds the memory controller: the v1
	// memory hierarchy, or the cgroup2 one when "memory" is in the
	// cgroup.controllers of its root. Nil when the memory controller is in
	// neither.
	Memory *Hierarchy
}

// ByID returns the hierarchy with the given id.
func (l *Layout) ByID(id uint32) (*Hierarchy, bool) {
	for i := range l.Hierarchies {
		if l.Hierarchies[i].ID == id {
			return &l.Hierarchies[i], true
		}
	}
	return nil, false
}

// Discover reads this process's cgroup layout from the running kernel.
func Discover() (*Layout, error) {
	return DiscoverFS(os.DirFS("/"))
}

// DiscoverFS reads the layout from fsys, which stands for the root
// directory: it reads proc/self/mountinfo, proc/self/cgroup and, for a
// cgroup2 mount at M, M/cgroup.controllers. Tests pass fixture trees.
func DiscoverFS(fsys fs.FS) (*Layout, error) {
	mi, err := readHostFile(fsys, mountinfoFile)
	if err != nil {
		return nil, err
	}
	mounts, err := parseMountinfo(mi, mountinfoFile)
	if err != nil {
		return nil, err
	}
	sc, err := readHostFile(fsys, selfCgroupFile)
	if err != nil {
		return nil, err
	}
	members, err := parseSelfCgroup(sc, selfCgroupFile)
	if err != nil {
		return nil, err
	}

	var hs []Hierarchy
	for _, m := range members {
		mnt, ok := pickMount(mounts, m)
		if !ok {
			// In /proc/self/cgroup but not mounted: nothing to use. The
			// 0:: line appears even on pure v1 hosts.
			continue
		}
		h := Hierarchy{
			ID:          m.id,
			Controllers: m.controllers,
			Mount:       mnt.mountPoint,
			Root:        mnt.root,
			Own:         m.path,
		}
		if m.id == 0 {
			cf := path.Join(mnt.mountPoint, "cgroup.controllers")
			b, err := readHostFile(fsys, cf)
			if err != nil {
				return nil, err
			}
			h.Controllers = strings.Fields(string(b))
		}
		hs = append(hs, h)
	}
	if len(hs) == 0 {
		return nil, fmt.Errorf("discover cgroups: %w: no cgroup hierarchy of this process is mounted (%s lists %d, %s has no matching cgroup or cgroup2 mount)",
			ErrUnsupported, selfCgroupFile, len(members), mountinfoFile)
	}
	return NewLayout(hs...), nil
}

// NewLayout makes the Layout of the hierarchies hs (at least one): ordered
// by ID, with Unified and Memory pointing into Hierarchies and the Mode
// they make. Discover uses it, and tests build fixture layouts with it.
func NewLayout(hs ...Hierarchy) *Layout {
	l := &Layout{Hierarchies: slices.Clone(hs)}
	slices.SortFunc(l.Hierarchies, func(a, b Hierarchy) int { return cmp.Compare(a.ID, b.ID) })
	hasV1 := false
	for i := range l.Hierarchies {
		h := &l.Hierarchies[i]
		if h.ID == 0 {
			l.Unified = h
		} else {
			hasV1 = true
		}
		if h.Has("memory") {
			// A controller is bound to exactly one hierarchy, so at most
			// one matches.
			l.Memory = h
		}
	}
	switch {
	case l.Unified != nil && !hasV1:
		l.Mode = ModeV2
	case l.Unified != nil:
		l.Mode = ModeHybrid
	case hasV1:
		l.Mode = ModeV1
	}
	return l
}

// pickMount chooses the mount that serves membership m: a cgroup2 mount for
// id 0, otherwise a v1 mount whose super options name every controller of
// m. Among several (bind mounts), it prefers the one whose root holds m's
// path most closely, then the first listed.
func pickMount(mounts []mountEntry, m membership) (mountEntry, bool) {
	var best mountEntry
	found, bestHolds := false, false
	for _, e := range mounts {
		if m.id == 0 {
			if e.fsType != "cgroup2" {
				continue
			}
		} else {
			if e.fsType != "cgroup" || !containsAll(e.superOpts, m.controllers) {
				continue
			}
		}
		_, holds := within(m.path, e.root)
		switch {
		case !found:
		case holds && !bestHolds:
		case holds && bestHolds && len(e.root) > len(best.root):
		default:
			continue
		}
		best, found, bestHolds = e, true, holds
	}
	return best, found
}

func containsAll(set, want []string) bool {
	for _, w := range want {
		if !slices.Contains(set, w) {
			return false
		}
	}
	return true
}

// readHostFile reads the absolute path name from fsys. A missing file means
// the kernel lacks the feature, so it also matches ErrUnsupported.
func readHostFile(fsys fs.FS, name string) ([]byte, error) {
	b, err := fs.ReadFile(fsys, strings.TrimPrefix(name, "/"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("read %s: %w: %w", name, ErrUnsupported, err)
		}
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return b, nil
}
