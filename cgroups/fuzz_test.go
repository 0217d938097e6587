package cgroups

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

// fixtureFiles returns the contents of testdata/*/proc/self/<name>, the
// host layouts the discovery tests use.
func fixtureFiles(f *testing.F, name string) [][]byte {
	f.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "*", "proc", "self", name))
	if err != nil || len(paths) == 0 {
		f.Fatalf("no %s fixtures: %v", name, err)
	}
	var out [][]byte
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// checkParseError fails t unless err is a *ParseError for file name,
// matching ErrMalformed, at a line of data (or the one after its end).
func checkParseError(t *testing.T, data []byte, name string, err error) {
	t.Helper()
	var pe *ParseError
	if !errors.As(err, &pe) || !errors.Is(err, ErrMalformed) || pe.File != name {
		t.Fatalf("error %v (%T) is not a *ParseError naming %s", err, err, name)
	}
	if lines := strings.Count(string(data), "\n") + 1; pe.Line < 1 || pe.Line > lines+1 {
		t.Fatalf("error %v at line %d, outside the input's %d lines", err, pe.Line, lines)
	}
}

// FuzzParseMountinfo checks the one mountinfo parser of the project (cgroup
// discovery and the test environment use it): no panic; a located
// *ParseError, or one entry per non-empty line whose mount point is
// absolute, whose filesystem type is not empty, and whose cgroup roots are
// absolute; MountPoints agrees with it.
func FuzzParseMountinfo(f *testing.F) {
	for _, b := range fixtureFiles(f, "mountinfo") {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := parseMountinfo(data, "fuzz")
		mps, mpErr := MountPoints(data, "fuzz")
		if (err == nil) != (mpErr == nil) {
			t.Fatalf("parseMountinfo error %v, MountPoints error %v", err, mpErr)
		}
		if err != nil {
			checkParseError(t, data, "fuzz", err)
			return
		}
		if len(mps) != len(entries) {
			t.Fatalf("%d mount points for %d entries", len(mps), len(entries))
		}
		for i, e := range entries {
			if !strings.HasPrefix(e.mountPoint, "/") || e.fsType == "" || mps[i] != e.mountPoint {
				t.Fatalf("entry %d accepted: %+v (MountPoints says %q)", i, e, mps[i])
			}
			if (e.fsType == "cgroup" || e.fsType == "cgroup2") && !strings.HasPrefix(e.root, "/") {
				t.Fatalf("cgroup mount with a relative root accepted: %+v", e)
			}
		}
	})
}

// FuzzParseSelfCgroup checks the /proc/self/cgroup parser: no panic; a
// located *ParseError, or memberships with absolute paths, distinct
// hierarchy ids, and controllers for every v1 hierarchy.
func FuzzParseSelfCgroup(f *testing.F) {
	for _, b := range fixtureFiles(f, "cgroup") {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ms, err := parseSelfCgroup(data, "fuzz")
		if err != nil {
			checkParseError(t, data, "fuzz", err)
			return
		}
		seen := map[uint32]bool{}
		for _, m := range ms {
			if !strings.HasPrefix(m.path, "/") || seen[m.id] || (m.id != 0 && len(m.controllers) == 0) {
				t.Fatalf("membership accepted: %+v", m)
			}
			seen[m.id] = true
		}
	})
}

// FuzzDiscoverFS feeds a fixture-shaped file system with arbitrary
// mountinfo and cgroup files to DiscoverFS: it must not panic, a failure
// must be ErrMalformed or ErrUnsupported, and a layout must be coherent:
// a mode, hierarchies sorted by id, Unified and Memory pointing into
// Hierarchies, and every hierarchy's own directory beneath its mount (or
// "" when this process's cgroup is outside the mount's root).
func FuzzDiscoverFS(f *testing.F) {
	mis, cgs := fixtureFiles(f, "mountinfo"), fixtureFiles(f, "cgroup")
	for i := range mis {
		f.Add(mis[i], cgs[i%len(cgs)])
	}
	f.Fuzz(func(t *testing.T, mountinfo, cgroup []byte) {
		fsys := fstest.MapFS{
			"proc/self/mountinfo":                      {Data: mountinfo},
			"proc/self/cgroup":                         {Data: cgroup},
			"sys/fs/cgroup/cgroup.controllers":         {Data: []byte("cpu io memory pids\n")},
			"sys/fs/cgroup/unified/cgroup.controllers": {Data: []byte("\n")},
		}
		l, err := DiscoverFS(fsys)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("error %v is neither ErrMalformed nor ErrUnsupported", err)
			}
			return
		}
		if l.Mode != ModeV1 && l.Mode != ModeV2 && l.Mode != ModeHybrid {
			t.Fatalf("mode %v", l.Mode)
		}
		for i, h := range l.Hierarchies {
			if i > 0 && l.Hierarchies[i-1].ID >= h.ID {
				t.Fatalf("hierarchies not sorted by distinct id: %+v", l.Hierarchies)
			}
			if !strings.HasPrefix(h.Mount, "/") {
				t.Fatalf("relative mount %q", h.Mount)
			}
			if own := h.OwnDir(); own != "" && own != h.Mount && !strings.HasPrefix(own, strings.TrimSuffix(h.Mount, "/")+"/") {
				t.Fatalf("own directory %q is not beneath the mount %q", own, h.Mount)
			}
		}
		for _, p := range []*Hierarchy{l.Unified, l.Memory} {
			if p == nil {
				continue
			}
			if _, ok := l.ByID(p.ID); !ok {
				t.Fatalf("pointer to hierarchy %d not in the layout", p.ID)
			}
		}
	})
}
