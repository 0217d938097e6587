package cgroups

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Dir is one cgroup directory in one hierarchy.
type Dir struct {
	// Hierarchy is the hierarchy the directory belongs to; it points into
	// the Layout's Hierarchies.
	Hierarchy *Hierarchy
	// Path is the absolute filesystem path.
	Path string
	// Rel is the path within the hierarchy, starting with "/": what
	// /proc/<pid>/cgroup and the kernel's cgroup tracepoints report.
	Rel string
}

// Resolve maps a cgroup path given by the user to a directory in h.
//
// A relative path (e.g. "nodeguard/test") is resolved against this
// process's own cgroup in h. An absolute path (e.g. "/kubepods") is a path
// within h. Either way ".." may not climb above that base: such paths, and
// empty paths or paths containing NUL, give ErrInvalidPath. A path that h
// does not show under its mount gives ErrUnsupported.
func (h *Hierarchy) Resolve(p string) (Dir, error) {
	if p == "" {
		return Dir{}, fmt.Errorf("resolve cgroup path: %w: empty", ErrInvalidPath)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return Dir{}, fmt.Errorf("resolve cgroup path %q: %w: contains NUL", p, ErrInvalidPath)
	}
	rel := p
	if !isCleanAbs(p) {
		// Kernel-reported paths are clean already and skip this.
		base := "/"
		if !strings.HasPrefix(p, "/") {
			base = h.Own
		}
		sub, err := cleanBeneath(p)
		if err != nil {
			return Dir{}, fmt.Errorf("resolve cgroup path %q: %w", p, err)
		}
		rel = joinRel(base, sub)
	}
	rest, ok := within(rel, h.Root)
	if !ok {
		return Dir{}, fmt.Errorf("resolve cgroup path %q in hierarchy %d: %w: %s is not beneath the mount's root %s",
			p, h.ID, ErrUnsupported, rel, h.Root)
	}
	return Dir{Hierarchy: h, Path: h.Mount + rest, Rel: rel}, nil
}

// isCleanAbs reports whether p is an absolute path with no empty, "." or
// ".." components and no trailing slash (except "/" itself).
func isCleanAbs(p string) bool {
	if p == "/" {
		return true
	}
	if !strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") {
		return false
	}
	for i := 0; i < len(p); {
		j := strings.IndexByte(p[i+1:], '/')
		if j < 0 {
			j = len(p) - i - 1
		}
		c := p[i+1 : i+1+j]
		if c == "" || c == "." || c == ".." {
			return false
		}
		i += j + 1
	}
	return true
}

// cleanBeneath cleans p as a relative path (a leading "/" is ignored) and
// returns its components joined by "/", or "" for the base itself. It fails
// when ".." would climb above the base.
func cleanBeneath(p string) (string, error) {
	var parts []string
	for _, c := range strings.Split(p, "/") {
		switch c {
		case "", ".":
		case "..":
			if len(parts) == 0 {
				return "", fmt.Errorf(`%w: ".." climbs above its base`, ErrInvalidPath)
			}
			parts = parts[:len(parts)-1]
		default:
			parts = append(parts, c)
		}
	}
	return strings.Join(parts, "/"), nil
}

func joinRel(base, sub string) string {
	switch {
	case sub == "":
		return base
	case base == "/":
		return "/" + sub
	}
	return base + "/" + sub
}

// Resolve maps p (see Hierarchy.Resolve) to a directory in every hierarchy
// of l, in the order of l.Hierarchies.
func (l *Layout) Resolve(p string) ([]Dir, error) {
	out := make([]Dir, 0, len(l.Hierarchies))
	for i := range l.Hierarchies {
		d, err := l.Hierarchies[i].Resolve(p)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// Monitored returns the hierarchies nodeguard watches for events: the memory
// hierarchy first, then the cgroup2 one when it is a different hierarchy.
// On pure v2 that is one hierarchy, on hybrid two, on pure v1 the memory
// one alone.
func (l *Layout) Monitored() []*Hierarchy {
	var out []*Hierarchy
	if l.Memory != nil {
		out = append(out, l.Memory)
	}
	if l.Unified != nil && l.Unified != l.Memory {
		out = append(out, l.Unified)
	}
	return out
}

// ResolveMonitored maps p (see Hierarchy.Resolve) to a directory in each of
// the Monitored hierarchies. It fails with ErrUnsupported when there are
// none.
func (l *Layout) ResolveMonitored(p string) ([]Dir, error) {
	hs := l.Monitored()
	if len(hs) == 0 {
		return nil, fmt.Errorf("resolve cgroup path %q: %w: neither a memory hierarchy nor a cgroup2 hierarchy is mounted", p, ErrUnsupported)
	}
	out := make([]Dir, 0, len(hs))
	for _, h := range hs {
		d, err := h.Resolve(p)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// PathOf maps a path within hierarchy id, as the kernel reports it (for
// example "/process_api/abc/ng/x" in a cgroup_mkdir tracepoint), to its
// filesystem path. It fails for an unknown hierarchy, a path that is not
// absolute, and a path not visible under the mount.
func (l *Layout) PathOf(hierarchyID uint32, rel string) (string, error) {
	h, ok := l.ByID(hierarchyID)
	if !ok {
		return "", fmt.Errorf("map cgroup path %q: %w: hierarchy %d is not mounted", rel, ErrUnsupported, hierarchyID)
	}
	if !strings.HasPrefix(rel, "/") {
		return "", fmt.Errorf("map cgroup path %q: %w: not absolute", rel, ErrInvalidPath)
	}
	d, err := h.Resolve(rel)
	if err != nil {
		return "", err
	}
	return d.Path, nil
}

// Rel maps an absolute filesystem path under one of l's mounts back to its
// directory: which hierarchy it is in, and its path within it. It is the
// inverse of PathOf.
func (l *Layout) Rel(fsPath string) (Dir, error) {
	if !filepath.IsAbs(fsPath) {
		return Dir{}, fmt.Errorf("map %q to a cgroup: %w: not an absolute filesystem path", fsPath, ErrInvalidPath)
	}
	clean := filepath.Clean(fsPath)
	var best *Hierarchy
	var bestRest string
	for i := range l.Hierarchies {
		h := &l.Hierarchies[i]
		rest, ok := within(clean, h.Mount)
		if ok && (best == nil || len(h.Mount) > len(best.Mount)) {
			best, bestRest = h, rest
		}
	}
	if best == nil {
		return Dir{}, fmt.Errorf("map %q to a cgroup: %w: not under any cgroup mount", fsPath, ErrNotCgroup)
	}
	rel := best.Root + bestRest
	if best.Root == "/" {
		rel = bestRest
		if rel == "" {
			rel = "/"
		}
	}
	return Dir{Hierarchy: best, Path: clean, Rel: rel}, nil
}
