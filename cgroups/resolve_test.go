package cgroups

import (
	"errors"
	"reflect"
	"testing"
)

// dirSummary is a Dir without its pointer, for comparison.
type dirSummary struct {
	ID   uint32
	Path string
	Rel  string
}

func summarize(ds []Dir) []dirSummary {
	out := make([]dirSummary, 0, len(ds))
	for _, d := range ds {
		out = append(out, dirSummary{d.Hierarchy.ID, d.Path, d.Rel})
	}
	return out
}

func TestResolveMonitored(t *testing.T) {
	tests := []struct {
		name    string
		fixture string
		path    string
		want    []dirSummary
		wantErr error
	}{
		{
			name:    "a relative path on hybrid resolves under our memcg and under the cgroup2 root",
			fixture: "hybrid",
			path:    "nodeguard/test",
			want: []dirSummary{
				{4, "/sys/fs/cgroup/memory" + hybridOwn + "/nodeguard/test", hybridOwn + "/nodeguard/test"},
				{0, "/sys/fs/cgroup/unified/nodeguard/test", "/nodeguard/test"},
			},
		},
		{
			name:    "an absolute path on hybrid is a path within each hierarchy",
			fixture: "hybrid",
			path:    "/kubepods",
			want: []dirSummary{
				{4, "/sys/fs/cgroup/memory/kubepods", "/kubepods"},
				{0, "/sys/fs/cgroup/unified/kubepods", "/kubepods"},
			},
		},
		{
			name:    "dot resolves to our own cgroups",
			fixture: "hybrid",
			path:    ".",
			want: []dirSummary{
				{4, "/sys/fs/cgroup/memory" + hybridOwn, hybridOwn},
				{0, "/sys/fs/cgroup/unified", "/"},
			},
		},
		{
			name:    "dot-dot that stays beneath the base is cleaned away",
			fixture: "hybrid",
			path:    "a/./b/../c//",
			want: []dirSummary{
				{4, "/sys/fs/cgroup/memory" + hybridOwn + "/a/c", hybridOwn + "/a/c"},
				{0, "/sys/fs/cgroup/unified/a/c", "/a/c"},
			},
		},
		{
			name:    "pure v2 gives one directory because memory and cgroup2 are the same hierarchy",
			fixture: "v2",
			path:    "kubepods/burstable",
			want: []dirSummary{
				{0, "/sys/fs/cgroup/system.slice/nodeguard.service/kubepods/burstable", "/system.slice/nodeguard.service/kubepods/burstable"},
			},
		},
		{
			name:    "pure v2 without memory still watches the cgroup2 hierarchy",
			fixture: "v2-no-memory",
			path:    "/kubepods",
			want:    []dirSummary{{0, "/sys/fs/cgroup/kubepods", "/kubepods"}},
		},
		{
			name:    "pure v1 gives the memory directory alone",
			fixture: "v1",
			path:    "kubepods",
			want: []dirSummary{
				{6, "/sys/fs/cgroup/memory/system.slice/nodeguard.service/kubepods", "/system.slice/nodeguard.service/kubepods"},
			},
		},
		{
			name:    "a container resolves relative paths beneath its mounted subtree",
			fixture: "container-v1",
			path:    "pods/a",
			want:    []dirSummary{{6, "/sys/fs/cgroup/memory/pods/a", "/docker/abc123/pods/a"}},
		},
		{
			name:    "a container cannot reach absolute paths outside its mounted subtree",
			fixture: "container-v1",
			path:    "/kubepods",
			wantErr: ErrUnsupported,
		},
		{
			name:    "a relative path climbing above our own cgroup is rejected",
			fixture: "hybrid",
			path:    "a/../../x",
			wantErr: ErrInvalidPath,
		},
		{
			name:    "an absolute path climbing above the root is rejected, not clamped",
			fixture: "v2",
			path:    "/../etc",
			wantErr: ErrInvalidPath,
		},
		{
			name:    "an empty path is rejected",
			fixture: "v2",
			path:    "",
			wantErr: ErrInvalidPath,
		},
		{
			name:    "a path with NUL is rejected",
			fixture: "v2",
			path:    "a\x00b",
			wantErr: ErrInvalidPath,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := fixture(t, tt.fixture)
			got, err := l.ResolveMonitored(tt.path)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("ResolveMonitored(%q) = %v, %v; want error matching %v", tt.path, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ResolveMonitored(%q): %v", tt.path, err)
			}
			if s := summarize(got); !reflect.DeepEqual(s, tt.want) {
				t.Errorf("ResolveMonitored(%q) =\n%+v\nwant\n%+v", tt.path, s, tt.want)
			}
			for _, d := range got {
				if _, ok := l.ByID(d.Hierarchy.ID); !ok || d.Hierarchy != mustByID(l, d.Hierarchy.ID) {
					t.Errorf("Dir.Hierarchy for %s does not point into Layout.Hierarchies", d.Path)
				}
			}
		})
	}
}

func mustByID(l *Layout, id uint32) *Hierarchy {
	h, _ := l.ByID(id)
	return h
}

func TestResolveCoversEveryHierarchy(t *testing.T) {
	l := fixture(t, "hybrid")
	got, err := l.Resolve("ng")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(l.Hierarchies) {
		t.Fatalf("Resolve gave %d dirs, want one per hierarchy (%d)", len(got), len(l.Hierarchies))
	}
	for i, d := range got {
		if want := l.Hierarchies[i].OwnDir() + "/ng"; d.Path != want {
			t.Errorf("dir %d = %s, want %s", i, d.Path, want)
		}
	}
}

func TestMonitoredWithoutMemoryOrCgroup2IsUnsupported(t *testing.T) {
	l := &Layout{Mode: ModeV1, Hierarchies: []Hierarchy{{ID: 3, Controllers: []string{"pids"}, Mount: "/p", Root: "/", Own: "/"}}}
	if _, err := l.ResolveMonitored("x"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("ResolveMonitored() error = %v, want ErrUnsupported", err)
	}
}

func TestPathOfAndRel(t *testing.T) {
	tests := []struct {
		name    string
		fixture string
		id      uint32
		rel     string
		want    string
		wantErr error
	}{
		{
			name:    "a tracepoint path in the v1 memory hierarchy maps under the memory mount",
			fixture: "hybrid", id: 4, rel: hybridOwn + "/ng/x",
			want: "/sys/fs/cgroup/memory" + hybridOwn + "/ng/x",
		},
		{
			name:    "a tracepoint path in the cgroup2 hierarchy maps under the unified mount",
			fixture: "hybrid", id: 0, rel: "/ng/x",
			want: "/sys/fs/cgroup/unified/ng/x",
		},
		{
			name:    "the root of a hierarchy maps to its mount point",
			fixture: "v2", id: 0, rel: "/",
			want: "/sys/fs/cgroup",
		},
		{
			name:    "a container maps paths beneath its mounted subtree",
			fixture: "container-v1", id: 6, rel: "/docker/abc123/pods/a",
			want: "/sys/fs/cgroup/memory/pods/a",
		},
		{
			name:    "an unmounted hierarchy is unsupported",
			fixture: "v1", id: 7, rel: "/",
			wantErr: ErrUnsupported,
		},
		{
			name:    "a relative path is invalid",
			fixture: "v2", id: 0, rel: "a/b",
			wantErr: ErrInvalidPath,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := fixture(t, tt.fixture)
			got, err := l.PathOf(tt.id, tt.rel)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("PathOf(%d, %q) = %q, %v; want error matching %v", tt.id, tt.rel, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("PathOf(%d, %q) = %q, %v; want %q", tt.id, tt.rel, got, err, tt.want)
			}
			d, err := l.Rel(got)
			if err != nil {
				t.Fatalf("Rel(%q): %v", got, err)
			}
			if d.Hierarchy.ID != tt.id || d.Rel != tt.rel || d.Path != got {
				t.Errorf("Rel(%q) = {%d %q %q}, want {%d %q %q}", got, d.Hierarchy.ID, d.Path, d.Rel, tt.id, got, tt.rel)
			}
		})
	}
}

func TestRelRejectsPathsOutsideCgroupMounts(t *testing.T) {
	tests := []struct {
		name    string
		path    string
		wantErr error
	}{
		{"a path outside every mount is not a cgroup", "/etc/passwd", ErrNotCgroup},
		{"the tmpfs holding the v1 mounts is not a cgroup", "/sys/fs/cgroup", ErrNotCgroup},
		{"a sibling whose name extends a mount point is not a cgroup", "/sys/fs/cgroup/memoryx/a", ErrNotCgroup},
		{"a relative path is invalid", "sys/fs/cgroup/memory", ErrInvalidPath},
	}
	l := fixture(t, "hybrid")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d, err := l.Rel(tt.path); !errors.Is(err, tt.wantErr) {
				t.Errorf("Rel(%q) = %+v, %v; want error matching %v", tt.path, d, err, tt.wantErr)
			}
		})
	}
}

func TestIsCleanAbs(t *testing.T) {
	tests := []struct {
		name string
		p    string
		want bool
	}{
		{"the root is clean", "/", true},
		{"a plain absolute path is clean", "/a/bc/d", true},
		{"names that merely start with dots are clean", "/.a/..b/c.", true},
		{"a relative path is not", "a/b", false},
		{"a trailing slash is not", "/a/", false},
		{"a double slash is not", "/a//b", false},
		{"a dot component is not", "/a/./b", false},
		{"a trailing dot-dot is not", "/a/..", false},
		{"the empty path is not", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := isCleanAbs(tt.p); got != tt.want {
				t.Errorf("isCleanAbs(%q) = %v, want %v", tt.p, got, tt.want)
			}
		})
	}
}
