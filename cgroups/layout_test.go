package cgroups

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"testing/fstest"
)

const hybridOwn = "/process_api/2960ba32275c6a14ec8a27faf41213de"

func fixtureFS(name string) fs.FS { return os.DirFS(filepath.Join("testdata", name)) }

func fixture(t *testing.T, name string) *Layout {
	t.Helper()
	l, err := DiscoverFS(fixtureFS(name))
	if err != nil {
		t.Fatalf("DiscoverFS(testdata/%s): %v", name, err)
	}
	return l
}

func TestDiscoverFS(t *testing.T) {
	type want struct {
		mode        Mode
		hierarchies []Hierarchy
		unified     int // index into hierarchies, -1 for nil
		memory      int // index into hierarchies, -1 for nil
		ownDirs     []string
	}
	tests := []struct {
		name    string
		fixture string
		want    want
	}{
		{
			name:    "pure v2 has one hierarchy that holds memory",
			fixture: "v2",
			want: want{
				mode: ModeV2,
				hierarchies: []Hierarchy{{
					ID: 0, Controllers: []string{"cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc"},
					Mount: "/sys/fs/cgroup", Root: "/", Own: "/system.slice/nodeguard.service",
				}},
				unified: 0, memory: 0,
				ownDirs: []string{"/sys/fs/cgroup/system.slice/nodeguard.service"},
			},
		},
		{
			name:    "pure v2 without the memory controller has no memory hierarchy",
			fixture: "v2-no-memory",
			want: want{
				mode: ModeV2,
				hierarchies: []Hierarchy{{
					ID: 0, Controllers: []string{"cpu", "io", "pids"},
					Mount: "/sys/fs/cgroup", Root: "/", Own: "/user.slice/user-1000.slice/session-3.scope",
				}},
				unified: 0, memory: -1,
				ownDirs: []string{"/sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope"},
			},
		},
		{
			name:    "hybrid development machine keeps memory on v1 and an empty cgroup2",
			fixture: "hybrid",
			want: want{
				mode: ModeHybrid,
				hierarchies: []Hierarchy{
					{ID: 0, Controllers: []string{"hugetlb"}, Mount: "/sys/fs/cgroup/unified", Root: "/", Own: "/"},
					{ID: 1, Controllers: []string{"cpu"}, Mount: "/sys/fs/cgroup/cpu", Root: "/", Own: "/"},
					{ID: 2, Controllers: []string{"cpuacct"}, Mount: "/sys/fs/cgroup/cpuacct", Root: "/", Own: "/"},
					{ID: 3, Controllers: []string{"cpuset"}, Mount: "/sys/fs/cgroup/cpuset", Root: "/", Own: "/"},
					{ID: 4, Controllers: []string{"memory"}, Mount: "/sys/fs/cgroup/memory", Root: "/", Own: hybridOwn},
					{ID: 5, Controllers: []string{"devices"}, Mount: "/sys/fs/cgroup/devices", Root: "/", Own: "/"},
					{ID: 6, Controllers: []string{"freezer"}, Mount: "/sys/fs/cgroup/freezer", Root: "/", Own: "/"},
					{ID: 7, Controllers: []string{"blkio"}, Mount: "/sys/fs/cgroup/blkio", Root: "/", Own: "/"},
					{ID: 8, Controllers: []string{"pids"}, Mount: "/sys/fs/cgroup/pids", Root: "/", Own: "/"},
					{ID: 9, Controllers: []string{"name=systemd"}, Mount: "/sys/fs/cgroup/systemd", Root: "/", Own: "/"},
				},
				unified: 0, memory: 4,
				ownDirs: []string{
					"/sys/fs/cgroup/unified", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpuacct",
					"/sys/fs/cgroup/cpuset", "/sys/fs/cgroup/memory" + hybridOwn, "/sys/fs/cgroup/devices",
					"/sys/fs/cgroup/freezer", "/sys/fs/cgroup/blkio", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/systemd",
				},
			},
		},
		{
			name:    "pure v1 ignores the 0:: line and hierarchies that are not mounted",
			fixture: "v1",
			want: want{
				mode: ModeV1,
				hierarchies: []Hierarchy{
					{ID: 1, Controllers: []string{"name=systemd"}, Mount: "/sys/fs/cgroup/systemd", Root: "/", Own: "/system.slice/nodeguard.service"},
					{ID: 3, Controllers: []string{"cpu", "cpuacct"}, Mount: "/sys/fs/cgroup/cpu,cpuacct", Root: "/", Own: "/system.slice/nodeguard.service"},
					{ID: 5, Controllers: []string{"net_prio", "net_cls"}, Mount: "/sys/fs/cgroup/net_cls,net_prio", Root: "/", Own: "/"},
					{ID: 6, Controllers: []string{"memory"}, Mount: "/sys/fs/cgroup/memory", Root: "/", Own: "/system.slice/nodeguard.service"},
					{ID: 11, Controllers: []string{"pids"}, Mount: "/sys/fs/cgroup/pids", Root: "/", Own: "/system.slice/nodeguard.service"},
				},
				unified: -1, memory: 3,
				ownDirs: []string{
					"/sys/fs/cgroup/systemd/system.slice/nodeguard.service",
					"/sys/fs/cgroup/cpu,cpuacct/system.slice/nodeguard.service",
					"/sys/fs/cgroup/net_cls,net_prio",
					"/sys/fs/cgroup/memory/system.slice/nodeguard.service",
					"/sys/fs/cgroup/pids/system.slice/nodeguard.service",
				},
			},
		},
		{
			name:    "v1 container mounts only its own subtree and prefers the mount that shows its cgroup",
			fixture: "container-v1",
			want: want{
				mode: ModeV1,
				hierarchies: []Hierarchy{
					{ID: 6, Controllers: []string{"memory"}, Mount: "/sys/fs/cgroup/memory", Root: "/docker/abc123", Own: "/docker/abc123"},
					{ID: 11, Controllers: []string{"pids"}, Mount: "/sys/fs/cgroup/pids", Root: "/docker/abc123", Own: "/docker/abc123"},
				},
				unified: -1, memory: 0,
				ownDirs: []string{"/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := fixture(t, tt.fixture)
			if l.Mode != tt.want.mode {
				t.Errorf("Mode = %v, want %v", l.Mode, tt.want.mode)
			}
			if !reflect.DeepEqual(l.Hierarchies, tt.want.hierarchies) {
				t.Errorf("Hierarchies =\n%+v\nwant\n%+v", l.Hierarchies, tt.want.hierarchies)
			}
			checkPtr(t, "Unified", l, l.Unified, tt.want.unified)
			checkPtr(t, "Memory", l, l.Memory, tt.want.memory)
			var own []string
			for i := range l.Hierarchies {
				own = append(own, l.Hierarchies[i].OwnDir())
			}
			if !reflect.DeepEqual(own, tt.want.ownDirs) {
				t.Errorf("OwnDir() =\n%q\nwant\n%q", own, tt.want.ownDirs)
			}
		})
	}
}

func checkPtr(t *testing.T, field string, l *Layout, got *Hierarchy, wantIdx int) {
	t.Helper()
	if wantIdx < 0 {
		if got != nil {
			t.Errorf("%s = %+v, want nil", field, *got)
		}
		return
	}
	if got != &l.Hierarchies[wantIdx] {
		t.Errorf("%s does not point at Hierarchies[%d]", field, wantIdx)
	}
}

func TestDiscoverFSErrors(t *testing.T) {
	const goodMI = "31 22 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
	files := func(mi, cg string) fstest.MapFS {
		fsys := fstest.MapFS{"sys/fs/cgroup/cgroup.controllers": {Data: []byte("memory\n")}}
		if mi != "" {
			fsys["proc/self/mountinfo"] = &fstest.MapFile{Data: []byte(mi)}
		}
		if cg != "" {
			fsys["proc/self/cgroup"] = &fstest.MapFile{Data: []byte(cg)}
		}
		return fsys
	}
	tests := []struct {
		name     string
		fsys     fs.FS
		is       error
		wantFile string
		wantLine int
	}{
		{
			name: "a host without cgroup mounts is unsupported",
			fsys: func() fstest.MapFS {
				return fstest.MapFS{
					"proc/self/mountinfo": {Data: []byte("28 1 254:1 / / rw - ext4 /dev/vda1 rw\n")},
					"proc/self/cgroup":    {Data: []byte("0::/\n")},
				}
			}(),
			is: ErrUnsupported,
		},
		{
			name: "a host whose only cgroup line is 0:: without a cgroup2 mount is unsupported",
			fsys: fixtureFS("no-cgroups"),
			is:   ErrUnsupported,
		},
		{
			name: "a kernel without /proc/self/cgroup is unsupported",
			fsys: files(goodMI, ""),
			is:   ErrUnsupported,
		},
		{
			name: "a cgroup2 mount without cgroup.controllers is unsupported",
			fsys: fstest.MapFS{
				"proc/self/mountinfo": {Data: []byte(goodMI)},
				"proc/self/cgroup":    {Data: []byte("0::/\n")},
			},
			is: ErrUnsupported,
		},
		{
			name:     "a mountinfo line without separator is malformed",
			fsys:     files(goodMI+"32 22 0:27 / /x rw shared:1 ext4 /dev/vda1 rw\n", "0::/\n"),
			is:       ErrMalformed,
			wantFile: "/proc/self/mountinfo", wantLine: 2,
		},
		{
			name:     "a mountinfo line with too few fields after the separator is malformed",
			fsys:     files(goodMI+"\n"+"32 22 0:27 / /x rw - ext4\n", "0::/\n"),
			is:       ErrMalformed,
			wantFile: "/proc/self/mountinfo", wantLine: 3,
		},
		{
			name:     "a mountinfo line without a major:minor pair is malformed",
			fsys:     files(`32 22 027 / /x rw - ext4 /dev/vda1 rw`+"\n", "0::/\n"),
			is:       ErrMalformed,
			wantFile: "/proc/self/mountinfo", wantLine: 1,
		},
		{
			name:     "a cgroup line without a path is malformed",
			fsys:     files(goodMI, "4:memory\n"),
			is:       ErrMalformed,
			wantFile: "/proc/self/cgroup", wantLine: 1,
		},
		{
			name:     "a cgroup line with a non-numeric hierarchy id is malformed",
			fsys:     files(goodMI, "0::/\nx:memory:/a\n"),
			is:       ErrMalformed,
			wantFile: "/proc/self/cgroup", wantLine: 2,
		},
		{
			name:     "a cgroup line with a relative path is malformed",
			fsys:     files(goodMI, "0::a/b\n"),
			is:       ErrMalformed,
			wantFile: "/proc/self/cgroup", wantLine: 1,
		},
		{
			name:     "a cgroup file listing a hierarchy twice is malformed",
			fsys:     files(goodMI, "0::/\n0::/a\n"),
			is:       ErrMalformed,
			wantFile: "/proc/self/cgroup", wantLine: 2,
		},
		{
			name:     "a v1 cgroup line without controllers is malformed",
			fsys:     files(goodMI, "3::/\n"),
			is:       ErrMalformed,
			wantFile: "/proc/self/cgroup", wantLine: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := DiscoverFS(tt.fsys)
			if err == nil {
				t.Fatalf("DiscoverFS() = %+v, want an error", l)
			}
			if !errors.Is(err, tt.is) {
				t.Fatalf("DiscoverFS() error %q does not match %v", err, tt.is)
			}
			other := ErrMalformed
			if tt.is == ErrMalformed {
				other = ErrUnsupported
			}
			if errors.Is(err, other) {
				t.Errorf("DiscoverFS() error %q also matches %v", err, other)
			}
			if tt.wantFile == "" {
				return
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("DiscoverFS() error %q is not a *ParseError", err)
			}
			if pe.File != tt.wantFile || pe.Line != tt.wantLine {
				t.Errorf("ParseError at %s line %d, want %s line %d (%v)", pe.File, pe.Line, tt.wantFile, tt.wantLine, err)
			}
		})
	}
}

func TestParseMountinfoUnescapesPaths(t *testing.T) {
	tests := []struct {
		name      string
		line      string
		wantRoot  string
		wantMount string
		wantOpts  []string
	}{
		{
			name:      "spaces in root and mount point are unescaped",
			line:      `1205 1202 0:26 /docker/pod\040sandbox /mnt/pod\040cg ro - cgroup cgroup rw,memory`,
			wantRoot:  "/docker/pod sandbox",
			wantMount: "/mnt/pod cg",
			wantOpts:  []string{"rw", "memory"},
		},
		{
			name:      "a backslash and a tab are unescaped",
			line:      `7 1 0:2 / /a\134b\011c rw shared:1 master:2 - tmpfs tmpfs rw`,
			wantRoot:  "/",
			wantMount: "/a\\b\tc",
			wantOpts:  []string{"rw"},
		},
		{
			name:      "a bind-mounted network namespace file has an object, not a path, as root",
			line:      `603 31 0:4 net:[4026532246] /tmp/env/netns rw shared:1 - nsfs nsfs rw`,
			wantRoot:  "net:[4026532246]",
			wantMount: "/tmp/env/netns",
			wantOpts:  []string{"rw"},
		},
		{
			name:      "an empty source field does not shift the super options",
			line:      `7 1 0:2 / /x rw - tmpfs  rw,size=4k`,
			wantRoot:  "/",
			wantMount: "/x",
			wantOpts:  []string{"rw", "size=4k"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMountinfo([]byte(tt.line+"\n"), "mountinfo")
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 {
				t.Fatalf("got %d entries, want 1", len(got))
			}
			e := got[0]
			if e.root != tt.wantRoot || e.mountPoint != tt.wantMount || !reflect.DeepEqual(e.superOpts, tt.wantOpts) {
				t.Errorf("got root %q mount %q opts %q, want %q %q %q", e.root, e.mountPoint, e.superOpts, tt.wantRoot, tt.wantMount, tt.wantOpts)
			}
		})
	}
}

func TestModeString(t *testing.T) {
	tests := []struct {
		name string
		mode Mode
		want string
	}{
		{"v2 prints as v2", ModeV2, "v2"},
		{"hybrid prints as hybrid", ModeHybrid, "hybrid"},
		{"v1 prints as v1", ModeV1, "v1"},
		{"the zero mode prints its number", Mode(0), "Mode(0)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.mode.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestNewLayoutLinksItsHierarchiesAndTellsTheMode(t *testing.T) {
	unified := Hierarchy{ID: 0, Controllers: []string{"cpu", "memory"}, Mount: "/sys/fs/cgroup"}
	unifiedBare := Hierarchy{ID: 0, Mount: "/sys/fs/cgroup/unified"}
	memory := Hierarchy{ID: 4, Controllers: []string{"memory"}, Mount: "/sys/fs/cgroup/memory"}
	cpu := Hierarchy{ID: 1, Controllers: []string{"cpu"}, Mount: "/sys/fs/cgroup/cpu"}
	tests := []struct {
		name       string
		in         []Hierarchy
		mode       Mode
		ids        []uint32
		unified    bool
		memoryID   uint32
		memoryNone bool
	}{
		{"one cgroup2 hierarchy with memory is pure v2", []Hierarchy{unified}, ModeV2, []uint32{0}, true, 0, false},
		{"v1 hierarchies beside a bare cgroup2 mount are hybrid, memory on v1", []Hierarchy{memory, unifiedBare, cpu}, ModeHybrid, []uint32{0, 1, 4}, true, 4, false},
		{"v1 hierarchies alone are v1", []Hierarchy{memory, cpu}, ModeV1, []uint32{1, 4}, false, 4, false},
		{"a layout without the memory controller has no Memory", []Hierarchy{cpu}, ModeV1, []uint32{1}, false, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.in)
			l := NewLayout(in...)
			if l.Mode != tt.mode {
				t.Errorf("Mode = %v, want %v", l.Mode, tt.mode)
			}
			var ids []uint32
			for _, h := range l.Hierarchies {
				ids = append(ids, h.ID)
			}
			if !slices.Equal(ids, tt.ids) {
				t.Errorf("hierarchy ids %v, want %v (by ID)", ids, tt.ids)
			}
			if !reflect.DeepEqual(in, tt.in) {
				t.Error("NewLayout reordered its argument")
			}
			into := func(h *Hierarchy) bool {
				for i := range l.Hierarchies {
					if h == &l.Hierarchies[i] {
						return true
					}
				}
				return false
			}
			if (l.Unified != nil) != tt.unified || l.Unified != nil && (!into(l.Unified) || l.Unified.ID != 0) {
				t.Errorf("Unified = %+v, want one (%v) pointing into Hierarchies", l.Unified, tt.unified)
			}
			switch {
			case tt.memoryNone && l.Memory != nil:
				t.Errorf("Memory = %+v, want none", l.Memory)
			case !tt.memoryNone && (l.Memory == nil || !into(l.Memory) || l.Memory.ID != tt.memoryID):
				t.Errorf("Memory = %+v, want hierarchy %d pointing into Hierarchies", l.Memory, tt.memoryID)
			}
		})
	}
}
