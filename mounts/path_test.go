package mounts

import (
	"errors"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestValidatePaths(t *testing.T) {
	tests := []struct {
		name              string
		path              string
		subPathOK, itemOK bool
	}{
		{"a plain name is valid", "key", true, true},
		{"a nested path is valid", "a/b/c.txt", true, true},
		{"a dot component is valid", "a/./b", true, true},
		{"a hidden file is valid", ".env", true, true},
		{"the empty path means no subPath but is no item", "", true, false},
		{"the volume root is no item", ".", true, false},
		{"an absolute path is refused", "/etc/passwd", false, false},
		{"a parent component is refused", "../x", false, false},
		{"a parent component in the middle is refused", "a/../../x", false, false},
		{"a trailing parent component is refused", "a/..", false, false},
		{"a reserved ..name is no item", "..data", true, false},
		{"a reserved ..name after cleaning is no item", "./..data/x", true, false},
		{"a NUL byte is refused", "a\x00b", false, false},
		{"a component longer than NAME_MAX is refused", strings.Repeat("x", 256), false, false},
		{"a path longer than PATH_MAX is refused", strings.Repeat("x/", 2049), false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := ValidateSubPath(tt.path); (err == nil) != tt.subPathOK {
				t.Errorf("ValidateSubPath(%q) = %v, want ok=%v", tt.path, err, tt.subPathOK)
			} else if err != nil && !errors.Is(err, ErrUnsafePath) {
				t.Errorf("ValidateSubPath(%q) = %v, does not wrap ErrUnsafePath", tt.path, err)
			}
			if err := ValidatePayloadPath(tt.path); (err == nil) != tt.itemOK {
				t.Errorf("ValidatePayloadPath(%q) = %v, want ok=%v", tt.path, err, tt.itemOK)
			}
		})
	}
}

// FuzzValidatePath checks that any path the validators accept stays beneath
// the directory it is joined to, and that payload paths never reach the
// atomic writer's reserved names.
func FuzzValidatePath(f *testing.F) {
	for _, s := range []string{"a", "a/b", "../a", "/abs", "..data", "a/..", "...", "a//b/", "./.."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		const root = "/volume"
		if ValidateSubPath(p) == nil && p != "" {
			j := filepath.Join(root, p)
			if j != root && !strings.HasPrefix(j, root+"/") {
				t.Fatalf("subPath %q accepted but joins to %q", p, j)
			}
			if !filepath.IsLocal(p) && path.Clean(p) != "." {
				t.Fatalf("subPath %q accepted but not local", p)
			}
		}
		if ValidatePayloadPath(p) == nil {
			c := path.Clean(p)
			if !filepath.IsLocal(c) || c == "." {
				t.Fatalf("payload path %q accepted but cleans to %q", p, c)
			}
			if strings.HasPrefix(c, "..") {
				t.Fatalf("payload path %q accepted but starts with '..' after cleaning", p)
			}
			if strings.IndexByte(p, 0) >= 0 {
				t.Fatalf("payload path %q with NUL accepted", p)
			}
		}
	})
}

func TestOpenBeneathFallbackRefusesEverySymlink(t *testing.T) {
	dir := t.TempDir()
	mustMkdir(t, filepath.Join(dir, "a/b"))
	mustWrite(t, filepath.Join(dir, "a/b/f"), "x")
	mustSymlink(t, "b", filepath.Join(dir, "a/inner"))
	mustSymlink(t, "/etc", filepath.Join(dir, "a/out"))
	fd, err := openDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)

	tests := []struct {
		name    string
		rel     string
		wantErr bool
	}{
		{"a plain path opens", "a/b/f", false},
		{"the root itself opens", ".", false},
		{"an inner symlink is refused too", "a/inner/f", true},
		{"an absolute symlink is refused", "a/out/passwd", true},
		{"a parent component is refused", "a/../a/b/f", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := openBeneathNoFollow(fd, tt.rel, unix.O_PATH)
			if err == nil {
				unix.Close(got)
			}
			if (err != nil) != tt.wantErr {
				t.Fatalf("openBeneathNoFollow(%q) = %v, want error %v", tt.rel, err, tt.wantErr)
			}
		})
	}
}

func TestOpenBeneathFollowsOnlyInnerSymlinks(t *testing.T) {
	dir := t.TempDir()
	mustMkdir(t, filepath.Join(dir, "a/b"))
	mustWrite(t, filepath.Join(dir, "a/b/f"), "x")
	mustSymlink(t, "b", filepath.Join(dir, "a/inner"))
	mustSymlink(t, "/etc", filepath.Join(dir, "a/abs"))
	mustSymlink(t, "../../..", filepath.Join(dir, "a/up"))
	mustSymlink(t, "/proc/self/root", filepath.Join(dir, "a/magic"))
	fd, err := openDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	for _, tt := range []struct {
		rel    string
		unsafe bool
	}{
		{"a/inner/f", false},
		{"a/abs/passwd", true},
		{"a/up/etc", true},
		{"a/magic/etc", true},
	} {
		got, err := openBeneath(fd, tt.rel, unix.O_PATH)
		if err == nil {
			unix.Close(got)
		}
		if tt.unsafe != errors.Is(err, ErrUnsafePath) {
			t.Errorf("openBeneath(%q) = %v, want unsafe=%v", tt.rel, err, tt.unsafe)
		}
	}
}
