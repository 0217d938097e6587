package cgroups_test

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

// TestTasksCountsTheProcessesOfACgroup starts a shell with N sleeping
// children in a real cgroup (a child cgroup of it holding them, so that
// the count covers the subtree) and checks that Tasks and TreeThreads see
// at least the N+1 processes, each with one thread or more.
func TestTasksCountsTheProcessesOfACgroup(t *testing.T) {
	parent := cgtest.New(t)
	child := parent.Child(t, "work")
	const n = 12
	cmd := exec.Command("/bin/sh", "-c", "for i in $(seq "+strconv.Itoa(n)+"); do sleep 30 & done; echo ready; wait")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(t, cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Kill(); cmd.Wait() })
	if _, err := out.Read(make([]byte, 6)); err != nil {
		t.Fatalf("the shell never got ready: %v", err)
	}

	threads, err := cgroups.TreeThreads(parent.MemoryDir())
	if err != nil {
		t.Fatal(err)
	}
	if threads < n+1 {
		t.Errorf("TreeThreads of the parent: %d, want at least the %d processes started", threads, n+1)
	}
	tasks, err := cgroups.Tasks(parent.Dirs())
	if err != nil {
		t.Fatal(err)
	}
	if tasks < n+1 {
		t.Errorf("Tasks of the parent: %d, want at least the %d processes started", tasks, n+1)
	}
	t.Logf("%d processes started: Tasks %d, TreeThreads %d", n+1, tasks, threads)
}

func TestTasksErrors(t *testing.T) {
	dir := t.TempDir()
	v1pids := &cgroups.Hierarchy{ID: 8, Controllers: []string{"pids"}, Mount: dir}
	v1mem := &cgroups.Hierarchy{ID: 4, Controllers: []string{"memory"}, Mount: dir}
	write := func(t *testing.T, p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("pids.current is taken as it is", func(t *testing.T) {
		d := filepath.Join(dir, "ok")
		write(t, filepath.Join(d, "pids.current"), "42\n")
		if n, err := cgroups.Tasks([]cgroups.Dir{{Hierarchy: v1pids, Path: d}}); n != 42 || err != nil {
			t.Errorf("got %d, %v; want 42", n, err)
		}
	})
	t.Run("a pids.current that is not a count is malformed", func(t *testing.T) {
		d := filepath.Join(dir, "bad")
		write(t, filepath.Join(d, "pids.current"), "max\n")
		if _, err := cgroups.Tasks([]cgroups.Dir{{Hierarchy: v1pids, Path: d}}); !errors.Is(err, cgroups.ErrMalformed) || !strings.Contains(err.Error(), "pids.current") {
			t.Errorf("got %v, want ErrMalformed naming pids.current", err)
		}
	})
	t.Run("without pids.current the memory tree's tasks are counted", func(t *testing.T) {
		d := filepath.Join(dir, "count")
		write(t, filepath.Join(d, "tasks"), "1\n2\n")
		write(t, filepath.Join(d, "a", "tasks"), "3\n")
		write(t, filepath.Join(d, "a", "b", "tasks"), "")
		if n, err := cgroups.Tasks([]cgroups.Dir{{Hierarchy: v1mem, Path: d}}); n != 3 || err != nil {
			t.Errorf("got %d, %v; want 3", n, err)
		}
	})
	t.Run("a cgroup that is gone is not zero tasks", func(t *testing.T) {
		d := filepath.Join(dir, "gone")
		_, err := cgroups.Tasks([]cgroups.Dir{{Hierarchy: v1pids, Path: d}, {Hierarchy: v1mem, Path: d}})
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("got %v, want ErrNotExist", err)
		}
	})
	t.Run("no memory or pids hierarchy is unsupported", func(t *testing.T) {
		cpu := &cgroups.Hierarchy{ID: 1, Controllers: []string{"cpu"}, Mount: dir}
		if _, err := cgroups.Tasks([]cgroups.Dir{{Hierarchy: cpu, Path: dir}}); !errors.Is(err, cgroups.ErrUnsupported) {
			t.Errorf("got %v, want ErrUnsupported", err)
		}
	})
}

// BenchmarkTasks counts the tasks of a real cgroup with one child, as the
// eviction actor does for every pod on every evaluation: pids.current on
// pure v2 (the sandbox delegates pids), the walk of the memory tree where
// the sandbox has no pids cgroup (v1 and hybrid hosts, whose pids
// hierarchy cgtest does not touch).
func BenchmarkTasks(b *testing.B) {
	parent := cgtest.New(b)
	parent.Child(b, "c")
	dirs := parent.Dirs()
	for b.Loop() {
		if _, err := cgroups.Tasks(dirs); err != nil {
			b.Fatal(err)
		}
	}
}
