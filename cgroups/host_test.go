package cgroups_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

// handleID reads a kernfs directory's id from its file handle: a witness
// independent of the inode number that cgroups.ID returns.
func handleID(t *testing.T, dir string) uint64 {
	t.Helper()
	h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, dir, 0)
	if err != nil {
		t.Fatalf("name_to_handle_at %s: %v", dir, err)
	}
	return binary.LittleEndian.Uint64(h.Bytes())
}

// memoryHierarchyFromProcCgroups reads which hierarchy /proc/cgroups says
// holds the memory controller (0 when it is on cgroup2 or unbound).
func memoryHierarchyFromProcCgroups(t *testing.T) (uint32, bool) {
	t.Helper()
	f, err := os.Open("/proc/cgroups")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "memory" {
			id, err := strconv.ParseUint(fields[1], 10, 32)
			if err != nil {
				t.Fatalf("/proc/cgroups: %v", err)
			}
			return uint32(id), true
		}
	}
	return 0, false
}

func TestDiscoverOnThisHost(t *testing.T) {
	l, err := cgroups.Discover()
	if errors.Is(err, cgroups.ErrUnsupported) {
		cgtest.Need(t, false, "no cgroup hierarchies here: "+err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("mode %v, %d hierarchies", l.Mode, len(l.Hierarchies))

	t.Run("the memory hierarchy agrees with /proc/cgroups", func(t *testing.T) {
		want, ok := memoryHierarchyFromProcCgroups(t)
		cgtest.Need(t, ok && l.Memory != nil, "no memory controller here")
		if l.Memory.ID != want {
			t.Errorf("Memory.ID = %d, /proc/cgroups says %d", l.Memory.ID, want)
		}
	})
	for i := range l.Hierarchies {
		h := &l.Hierarchies[i]
		t.Run("our own cgroup in hierarchy "+strconv.Itoa(int(h.ID))+" exists and maps back to itself", func(t *testing.T) {
			dir := h.OwnDir()
			if dir == "" {
				t.Fatalf("own cgroup %s is not visible under %s (root %s)", h.Own, h.Mount, h.Root)
			}
			id, err := cgroups.ID(dir)
			if err != nil {
				t.Fatal(err)
			}
			if want := handleID(t, dir); id != want {
				t.Errorf("ID(%s) = %d, file handle says %d", dir, id, want)
			}
			d, err := l.Rel(dir)
			if err != nil {
				t.Fatal(err)
			}
			if d.Hierarchy != h || d.Rel != h.Own {
				t.Errorf("Rel(%s) = hierarchy %d %q, want %d %q", dir, d.Hierarchy.ID, d.Rel, h.ID, h.Own)
			}
			p, err := l.PathOf(h.ID, h.Own)
			if err != nil || p != dir {
				t.Errorf("PathOf(%d, %q) = %q, %v; want %q", h.ID, h.Own, p, err, dir)
			}
		})
	}
}

func TestWalkAndIDOnRealCgroups(t *testing.T) {
	s := cgtest.New(t)
	for _, d := range s.Dirs() {
		t.Run("hierarchy "+strconv.Itoa(int(d.Hierarchy.ID))+" walks a live tree and ids follow directories", func(t *testing.T) {
			for _, sub := range []string{"a/b", "c"} {
				if err := os.MkdirAll(filepath.Join(d.Path, sub), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			var seen []string
			ids := make(map[uint64]string)
			err := cgroups.Walk(d.Path, func(p string) error {
				rel, _ := filepath.Rel(d.Path, p)
				seen = append(seen, rel)
				id, err := cgroups.ID(p)
				if err != nil {
					return err
				}
				if prev, dup := ids[id]; dup {
					t.Errorf("%s and %s share id %d", prev, rel, id)
				}
				ids[id] = rel
				if rel == "a" {
					// c vanishes mid-walk: the walk goes on.
					return unix.Rmdir(filepath.Join(d.Path, "c"))
				}
				return nil
			})
			if err != nil {
				t.Fatalf("Walk: %v", err)
			}
			if want := []string{".", "a", "a/b"}; !slices.Equal(seen, want) {
				t.Errorf("Walk visited %q, want %q", seen, want)
			}
			if err := unix.Rmdir(filepath.Join(d.Path, "a", "b")); err != nil {
				t.Fatal(err)
			}
			if _, err := cgroups.ID(filepath.Join(d.Path, "a", "b")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("ID of a removed cgroup = %v, want ErrNotExist", err)
			}
			rel, err := s.Layout().Rel(filepath.Join(d.Path, "a"))
			if err != nil {
				t.Fatal(err)
			}
			if want := d.Rel + "/a"; rel.Rel != want {
				t.Errorf("Rel() = %q, want %q", rel.Rel, want)
			}
		})
	}
}

func TestEmptyTreeAndRemoveTreeEndARealSubtree(t *testing.T) {
	s := cgtest.New(t)
	child := s.Child(t, "a")
	cmd := exec.Command("sleep", "60")
	if err := child.Start(t, cmd); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	deadline := time.Now().Add(5 * time.Second)
	for _, d := range s.Dirs() {
		if err := cgroups.EmptyTree(d.Path, deadline); err != nil {
			t.Fatalf("EmptyTree(%s): %v", d.Path, err)
		}
	}
	select {
	case err := <-waited:
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Errorf("the child cgroup's process ended with %v, want SIGKILL", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the child cgroup's process did not end")
	}
	for _, d := range s.Dirs() {
		if err := cgroups.RemoveTree(d.Path, deadline); err != nil {
			t.Fatalf("RemoveTree(%s): %v", d.Path, err)
		}
		if _, err := os.Stat(d.Path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is still there: %v", d.Path, err)
		}
	}
}
