package kubeletproc

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/nodeguard/nodeguard/cgroups"
)

// fakeHybrid is a layout like this host's, its hierarchies mounted at
// plain directories beneath base: memory on v1 with this process in
// /process_api/abc, cpu on v1 and cgroup2 with this process at the root.
func fakeHybrid(t *testing.T, base string) *cgroups.Layout {
	t.Helper()
	mk := func(p string) string {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mk(filepath.Join(base, "memory", "process_api", "abc"))
	return cgroups.NewLayout(
		cgroups.Hierarchy{ID: 4, Controllers: []string{"memory"}, Mount: mk(filepath.Join(base, "memory")), Root: "/", Own: "/process_api/abc"},
		cgroups.Hierarchy{ID: 1, Controllers: []string{"cpu"}, Mount: mk(filepath.Join(base, "cpu")), Root: "/", Own: "/"},
		cgroups.Hierarchy{ID: 0, Mount: mk(filepath.Join(base, "unified")), Root: "/", Own: "/"},
	)
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func TestTheCgroupRootIsBeneathTheMemoryCgroupAtOnePathInEveryHierarchy(t *testing.T) {
	base := t.TempDir()
	l := fakeHybrid(t, base)
	// Someone else's cgroup beside where the root goes, in cpu: stays.
	if err := os.MkdirAll(filepath.Join(base, "cpu", "process_api", "other"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := makeCgroupRoot(l, "nodeguard-crienv-1-x/kubelet")
	if err != nil {
		t.Fatal(err)
	}
	const want = "/process_api/abc/nodeguard-crienv-1-x/kubelet"
	if r.Path() != want {
		t.Fatalf("path %s, want %s", r.Path(), want)
	}
	dirs, err := r.Dirs()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"memory", "cpu", "unified"} {
		d := filepath.Join(base, h) + want
		if !exists(d) {
			t.Errorf("%s missing", d)
		}
	}
	if len(dirs) != 3 {
		t.Errorf("dirs %v, want one per hierarchy", dirs)
	}
	// The kubelet's tree beneath it.
	if err := os.MkdirAll(filepath.Join(base, "cpu")+want+"/kubepods/besteffort", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := r.Remove(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		stay bool
	}{
		{"memory/process_api/abc", true}, // this process's own memory cgroup
		{"memory/process_api/abc/nodeguard-crienv-1-x", false},
		{"cpu/process_api", true}, // someone else's cgroup is beneath it
		{"cpu/process_api/other", true},
		{"cpu/process_api/abc", false},
		{"unified/process_api", false},
	} {
		if got := exists(filepath.Join(base, c.path)); got != c.stay {
			t.Errorf("%s there: %v, want %v", c.path, got, c.stay)
		}
	}
	if err := r.Remove(); err != nil {
		t.Errorf("a second Remove: %v, want nothing to do", err)
	}
}

func TestACgroupRootOutsideTheMemoryCgroupIsRefused(t *testing.T) {
	l := fakeHybrid(t, t.TempDir())
	for _, rel := range []string{"/kubelet", "../kubelet", ""} {
		if _, err := makeCgroupRoot(l, rel); !errors.Is(err, cgroups.ErrInvalidPath) {
			t.Errorf("makeCgroupRoot(%q): %v, want ErrInvalidPath", rel, err)
		}
	}
	noMemory := cgroups.NewLayout(cgroups.Hierarchy{ID: 0, Mount: t.TempDir(), Root: "/", Own: "/"})
	if _, err := makeCgroupRoot(noMemory, "kubelet"); !errors.Is(err, cgroups.ErrUnsupported) {
		t.Errorf("no memory controller: %v, want ErrUnsupported", err)
	}
}
