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
	startSleepers(t, child, n)

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

// startSleepers starts, in sb, a shell with n sleeping children and
// returns once they all run; they are killed when t ends.
func startSleepers(t *testing.T, sb *cgtest.Sandbox, n int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "for i in $(seq "+strconv.Itoa(n)+"); do sleep 30 & done; echo ready; wait")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Start(t, cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Kill(); cmd.Wait() })
	if _, err := out.Read(make([]byte, 6)); err != nil {
		t.Fatalf("the shell never got ready: %v", err)
	}
	return cmd
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

// TestTaskCounterCountsAsTasksAndTellsAGoneCgroup counts a real cgroup's
// tasks with a TaskCounter (pids.current kept open where the sandbox has
// pids: the VM lane's pure cgroup2; the walk elsewhere), then removes the
// cgroup and makes it again under the same path: the counter reports it
// gone instead of reading the new cgroup.
func TestTaskCounterCountsAsTasksAndTellsAGoneCgroup(t *testing.T) {
	parent := cgtest.New(t)
	child := parent.Child(t, "work")
	const n = 5
	cmd := startSleepers(t, child, n)
	c, err := cgroups.OpenTaskCounter(child.Dirs())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 3 { // the same kept file, read again
		got, err := c.Count()
		if err != nil {
			t.Fatal(err)
		}
		want, err := cgroups.Tasks(child.Dirs())
		if err != nil {
			t.Fatal(err)
		}
		if got < n+1 || got != want {
			t.Fatalf("count %d: %d tasks, want Tasks' %d and at least the %d processes", i, got, want, n+1)
		}
	}
	child.Kill()
	cmd.Wait()
	if err := child.Remove(); err != nil {
		t.Fatal(err)
	}
	again := parent.Child(t, "work")
	if _, err := c.Count(); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after the cgroup was removed and %s made again: %v, want an error matching fs.ErrNotExist", again.Rel(), err)
	}
}

func TestTaskCounterErrors(t *testing.T) {
	dir := t.TempDir()
	v1pids := &cgroups.Hierarchy{ID: 8, Controllers: []string{"pids"}, Mount: dir}
	p := filepath.Join(dir, "pids.current")
	if err := os.WriteFile(p, []byte("42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := cgroups.OpenTaskCounter([]cgroups.Dir{{Hierarchy: v1pids, Path: dir}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n, err := c.Count(); n != 42 || err != nil {
		t.Fatalf("got %d, %v; want 42", n, err)
	}
	for _, bad := range []string{"max\n", "-1\n", "", strings.Repeat("9", 40)} {
		if err := os.WriteFile(p, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Count(); !errors.Is(err, cgroups.ErrMalformed) || !strings.Contains(err.Error(), "pids.current") {
			t.Errorf("pids.current %q: %v, want ErrMalformed naming pids.current", bad, err)
		}
	}
	v1mem := &cgroups.Hierarchy{ID: 4, Controllers: []string{"memory"}, Mount: dir}
	gone := filepath.Join(dir, "gone")
	if _, err := cgroups.OpenTaskCounter([]cgroups.Dir{{Hierarchy: v1pids, Path: gone}, {Hierarchy: v1mem, Path: gone}}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a cgroup that is gone: %v, want ErrNotExist", err)
	}
}

// BenchmarkTaskCounter is BenchmarkTasks with the counter the eviction
// actor keeps per pod.
func BenchmarkTaskCounter(b *testing.B) {
	parent := cgtest.New(b)
	parent.Child(b, "c")
	c, err := cgroups.OpenTaskCounter(parent.Dirs())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for b.Loop() {
		if _, err := c.Count(); err != nil {
			b.Fatal(err)
		}
	}
}
