package cgstat

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/nodeguard/nodeguard/cgroups"
)

// testdataDir returns the absolute path of testdata/name.
func testdataDir(t testing.TB, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// copyTree copies testdata/name into a fresh temporary directory and
// returns the copy's path, for tests that change files.
func copyTree(t testing.TB, name string) string {
	t.Helper()
	src := testdataDir(t, name)
	dst := filepath.Join(t.TempDir(), name)
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// hybridLayout is the development machines' layout with its mounts under
// root (a copy of testdata/hybrid): v1 cpu, cpuacct, memory (where this
// process lives in /process_api/<hash>), freezer (not in the fixture),
// blkio and pids, and a cgroup2 mount without controllers. Only the
// hierarchies whose controllers are listed in only are kept, when given.
func hybridLayout(root string, only ...string) *cgroups.Layout {
	all := []cgroups.Hierarchy{
		{ID: 0, Mount: root + "/unified", Root: "/", Own: "/"},
		{ID: 1, Controllers: []string{"cpu"}, Mount: root + "/cpu", Root: "/", Own: "/"},
		{ID: 2, Controllers: []string{"cpuacct"}, Mount: root + "/cpuacct", Root: "/", Own: "/"},
		{ID: 4, Controllers: []string{"memory"}, Mount: root + "/memory", Root: "/", Own: "/" + ownV1},
		{ID: 6, Controllers: []string{"freezer"}, Mount: root + "/freezer", Root: "/", Own: "/"},
		{ID: 7, Controllers: []string{"blkio"}, Mount: root + "/blkio", Root: "/", Own: "/"},
		{ID: 8, Controllers: []string{"pids"}, Mount: root + "/pids", Root: "/", Own: "/"},
	}
	var kept []cgroups.Hierarchy
	for _, h := range all {
		keep := len(only) == 0 || h.ID == 0
		for _, c := range only {
			keep = keep || h.Has(c)
		}
		if keep {
			kept = append(kept, h)
		}
	}
	return cgroups.NewLayout(kept...)
}

// v2Layout is a pure cgroup2 layout mounted at root (testdata/v2).
func v2Layout(root string) *cgroups.Layout {
	return cgroups.NewLayout(cgroups.Hierarchy{
		ID: 0, Controllers: []string{"cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc"},
		Mount: root, Root: "/", Own: "/",
	})
}

func resolve(t testing.TB, l *cgroups.Layout, p string) []cgroups.Dir {
	t.Helper()
	dirs, err := l.Resolve(p)
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

func resolveMonitored(t testing.TB, l *cgroups.Layout, p string) []cgroups.Dir {
	t.Helper()
	dirs, err := l.ResolveMonitored(p)
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}
