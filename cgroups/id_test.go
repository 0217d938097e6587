package cgroups

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// mkTree creates the directories (paths ending in "/"), files and symlinks
// ("name -> target") described by spec under a temporary directory.
func mkTree(t *testing.T, spec ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, s := range spec {
		if name, target, ok := strings.Cut(s, " -> "); ok {
			if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
				t.Fatal(err)
			}
			continue
		}
		p := filepath.Join(root, s)
		if strings.HasSuffix(s, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestWalk(t *testing.T) {
	tests := []struct {
		name string
		tree []string
		// fn decides what to return for a visited path relative to the
		// root; it may also change the tree.
		fn   func(root, rel string) error
		want []string
	}{
		{
			name: "visits directories parents first and skips files",
			tree: []string{"b/", "a/x/", "a/cgroup.procs", "memory.max"},
			want: []string{".", "a", "a/x", "b"},
		},
		{
			name: "does not follow symbolic links beneath the root",
			tree: []string{"a/", "elsewhere/", "link -> elsewhere"},
			want: []string{".", "a", "elsewhere"},
		},
		{
			name: "skips a directory removed while walking",
			tree: []string{"a/", "b/c/"},
			fn: func(root, rel string) error {
				if rel == "a" {
					return os.RemoveAll(filepath.Join(root, "b"))
				}
				return nil
			},
			want: []string{".", "a"},
		},
		{
			name: "does not descend where fn returns SkipDir",
			tree: []string{"a/x/", "b/"},
			fn: func(root, rel string) error {
				if rel == "a" {
					return fs.SkipDir
				}
				return nil
			},
			want: []string{".", "a", "b"},
		},
		{
			name: "stops where fn returns SkipAll",
			tree: []string{"a/x/", "b/"},
			fn: func(root, rel string) error {
				if rel == "a" {
					return fs.SkipAll
				}
				return nil
			},
			want: []string{".", "a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := mkTree(t, tt.tree...)
			var got []string
			err := Walk(root, func(p string) error {
				rel, err := filepath.Rel(root, p)
				if err != nil {
					return err
				}
				got = append(got, rel)
				if tt.fn != nil {
					return tt.fn(root, rel)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("Walk: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("visited %q, want %q", got, tt.want)
			}
		})
	}
}

func TestWalkErrors(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name string
		dir  func(root string) string
		fn   func(string) error
		want error
	}{
		{
			name: "a missing root is an error",
			dir:  func(root string) string { return filepath.Join(root, "gone") },
			fn:   func(string) error { return nil },
			want: fs.ErrNotExist,
		},
		{
			name: "a root that is a file is an error",
			dir:  func(root string) string { return filepath.Join(root, "f") },
			fn:   func(string) error { return nil },
			want: nil, // any error
		},
		{
			name: "an error from fn stops the walk and is returned",
			dir:  func(root string) string { return root },
			fn:   func(string) error { return boom },
			want: boom,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := mkTree(t, "f", "a/")
			err := Walk(tt.dir(root), tt.fn)
			if err == nil {
				t.Fatal("Walk() = nil, want an error")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("Walk() = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestIDRejectsNonCgroupDirectories(t *testing.T) {
	tests := []struct {
		name string
		dir  func(t *testing.T) string
		want error
	}{
		{"a temporary directory is not a cgroup", func(t *testing.T) string { return t.TempDir() }, ErrNotCgroup},
		{"a missing directory is an error", func(t *testing.T) string { return filepath.Join(t.TempDir(), "x") }, fs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if id, err := ID(tt.dir(t)); !errors.Is(err, tt.want) {
				t.Errorf("ID() = %d, %v; want error matching %v", id, err, tt.want)
			}
		})
	}
}
