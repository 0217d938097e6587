package cgstat

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadCgroupMemoryFixtures(t *testing.T) {
	tests := []struct {
		name   string
		read   func(string) (CgroupMemory, error)
		dir    string
		want   CgroupMemory
		wantWS uint64
	}{
		{
			name:   "the v1 root memcg gives usage_in_bytes and total_inactive_file, not the local inactive_file",
			read:   ReadCgroupMemoryV1,
			dir:    "cgroupv1-root",
			want:   CgroupMemory{Usage: 706211840, InactiveFile: 253878272},
			wantWS: 706211840 - 253878272,
		},
		{
			name:   "the v2 root, without memory.current, gives anon + file as usage",
			read:   ReadCgroupMemoryV2,
			dir:    "cgroupv2-root",
			want:   CgroupMemory{Usage: 1073741824 + 3221225472, InactiveFile: 2147483648},
			wantWS: 1073741824 + 3221225472 - 2147483648,
		},
		{
			name:   "a v2 cgroup with memory.current gives that as usage",
			read:   ReadCgroupMemoryV2,
			dir:    "cgroupv2-kubepods",
			want:   CgroupMemory{Usage: 2415919104, InactiveFile: 805306368},
			wantWS: 2415919104 - 805306368,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.read(filepath.Join("testdata", tt.dir))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want || got.WorkingSet() != tt.wantWS {
				t.Errorf("got %+v (working set %d), want %+v (working set %d)", got, got.WorkingSet(), tt.want, tt.wantWS)
			}
		})
	}
}

func TestWorkingSetIsFlooredAtZero(t *testing.T) {
	tests := []struct {
		name string
		c    CgroupMemory
		want uint64
	}{
		{"usage above inactive file leaves the difference", CgroupMemory{Usage: 300, InactiveFile: 100}, 200},
		{"usage equal to inactive file leaves nothing", CgroupMemory{Usage: 100, InactiveFile: 100}, 0},
		{"inactive file above usage floors at zero instead of wrapping", CgroupMemory{Usage: 100, InactiveFile: 300}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.c.WorkingSet(); got != tt.want {
				t.Errorf("WorkingSet() = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestReadCgroupMemoryErrors(t *testing.T) {
	type files map[string]string
	v1 := files{"memory.usage_in_bytes": "100\n", "memory.stat": "cache 1\ntotal_inactive_file 40\n"}
	v2root := files{"memory.stat": "anon 1\nfile 2\ninactive_file 1\n"}
	with := func(base files, name, content string) files {
		f := files{}
		for k, v := range base {
			f[k] = v
		}
		if content == "" {
			delete(f, name)
		} else {
			f[name] = content
		}
		return f
	}
	tests := []struct {
		name  string
		read  func(string) (CgroupMemory, error)
		files files
		want  error
		says  string
	}{
		{"a v1 directory without usage_in_bytes is unsupported", ReadCgroupMemoryV1, with(v1, "memory.usage_in_bytes", ""), ErrUnsupported, "memory.usage_in_bytes"},
		{"a v1 directory without memory.stat is unsupported", ReadCgroupMemoryV1, with(v1, "memory.stat", ""), ErrUnsupported, "memory.stat"},
		{"a v1 usage that is not a number is malformed", ReadCgroupMemoryV1, with(v1, "memory.usage_in_bytes", "max\n"), ErrMalformed, "not an unsigned integer"},
		{"a v1 memory.stat without total_inactive_file is malformed", ReadCgroupMemoryV1, with(v1, "memory.stat", "inactive_file 4\n"), ErrMalformed, `no "total_inactive_file" line`},
		{"a garbage memory.stat line is malformed", ReadCgroupMemoryV1, with(v1, "memory.stat", "total_inactive_file 4\nbogus\n"), ErrMalformed, "line 2"},
		{"a memory.stat cut short of its last newline is malformed", ReadCgroupMemoryV1, with(v1, "memory.stat", "cache 1\ntotal_inactive_file 4"), ErrMalformed, "truncated"},
		{"a v2 root without memory.stat is unsupported", ReadCgroupMemoryV2, files{}, ErrUnsupported, "memory.stat"},
		{"a v2 root memory.stat without anon is malformed", ReadCgroupMemoryV2, with(v2root, "memory.stat", "file 2\ninactive_file 1\n"), ErrMalformed, `no "anon" line`},
		{"a v2 anon + file that overflows is malformed", ReadCgroupMemoryV2, with(v2root, "memory.stat", "anon 18446744073709551615\nfile 2\ninactive_file 1\n"), ErrMalformed, "overflows"},
		{"a v2 memory.current that is not a number is malformed", ReadCgroupMemoryV2, with(v2root, "memory.current", "x\n"), ErrMalformed, "memory.current"},
		{"a non-root v2 memory.stat without inactive_file is malformed", ReadCgroupMemoryV2, files{"memory.current": "5\n", "memory.stat": "anon 1\n"}, ErrMalformed, `no "inactive_file" line`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range tt.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := tt.read(dir)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.says) || !strings.Contains(err.Error(), dir) {
				t.Errorf("error %v, want %v naming %s and saying %q", err, tt.want, dir, tt.says)
			}
		})
	}
}

func TestReadCgroupMemoryOfARemovedCgroupIsGone(t *testing.T) {
	for _, tt := range []struct {
		name string
		read func(string) (CgroupMemory, error)
	}{
		{"a v1 directory that no longer exists is gone", ReadCgroupMemoryV1},
		{"a v2 directory that no longer exists is gone", ReadCgroupMemoryV2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "removed")
			_, err := tt.read(dir)
			if !errors.Is(err, ErrGone) || errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), dir) {
				t.Errorf("error %v, want ErrGone (and not ErrUnsupported) naming %s", err, dir)
			}
		})
	}
}

func TestMemoryGivesTheKubeletsFigures(t *testing.T) {
	m := Memory{Usage: 300, InactiveFile: 100, ActiveFile: 50, Anon: 7}
	if got, want := m.CgroupMemory(), (CgroupMemory{Usage: 300, InactiveFile: 100}); got != want {
		t.Errorf("CgroupMemory() = %+v, want %+v", got, want)
	}
}
