package cgroups_test

import (
	"os"
	"syscall"
	"testing"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

func TestResolverAsksTheKernelForUnknownIDs(t *testing.T) {
	cgtest.RequirePrivileged(t)
	sb := cgtest.New(t)
	for _, d := range sb.Dirs() {
		fi, err := os.Stat(d.Path)
		if err != nil {
			t.Fatal(err)
		}
		id := fi.Sys().(*syscall.Stat_t).Ino
		r := cgroups.NewPathResolver(map[uint32]string{d.Hierarchy.ID: d.Hierarchy.Mount})
		got, err := r.Path(d.Hierarchy.ID, id)
		if err != nil {
			t.Fatalf("resolve %s: %v", d.Path, err)
		}
		if got != d.Path {
			t.Errorf("id %d resolved to %q, want %q", id, got, d.Path)
		}
	}
}

func TestResolverReportsUnknownHierarchies(t *testing.T) {
	r := cgroups.NewPathResolver(map[uint32]string{})
	if p, err := r.Path(7, 42); err == nil {
		t.Fatalf("resolved an id in an unmounted hierarchy to %q", p)
	}
}

func TestResolverPrefersLearnedPaths(t *testing.T) {
	r := cgroups.NewPathResolver(map[uint32]string{})
	r.Learn(3, 9, "/x/y")
	if p, err := r.Path(3, 9); err != nil || p != "/x/y" {
		t.Fatalf("got %q, %v; want the learned path", p, err)
	}
	r.Forget(3, 9)
	if _, err := r.Path(3, 9); err == nil {
		t.Fatal("a forgotten id still resolved")
	}
}
