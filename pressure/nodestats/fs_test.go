package nodestats

import (
	"context"
	"errors"
	"io/fs"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestFSStatsFromStatfs(t *testing.T) {
	tests := []struct {
		name    string
		in      unix.Statfs_t
		want    FSStats
		wantErr string
	}{
		{
			name: "byte counts are block counts times the fragment size, not the block size",
			in:   unix.Statfs_t{Bsize: 4096, Frsize: 1024, Blocks: 1000, Bfree: 300, Bavail: 200, Files: 64, Ffree: 10},
			want: FSStats{Path: "/x", CapacityBytes: 1024000, FreeBytes: 307200, AvailableBytes: 204800, Inodes: 64, InodesFree: 10},
		},
		{
			name: "a filesystem without an inode limit reports zero inodes",
			in:   unix.Statfs_t{Bsize: 4096, Frsize: 4096, Blocks: 10, Bfree: 5, Bavail: 5},
			want: FSStats{Path: "/x", CapacityBytes: 40960, FreeBytes: 20480, AvailableBytes: 20480},
		},
		{
			name:    "a zero fragment size is malformed",
			in:      unix.Statfs_t{Bsize: 4096, Blocks: 10},
			wantErr: "fragment size 0",
		},
		{
			name:    "byte counts that overflow 64 bits are malformed",
			in:      unix.Statfs_t{Frsize: 4096, Blocks: 1 << 60},
			wantErr: "overflow",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := fsStatsOf("/x", &tt.in)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error %v, want ErrMalformed saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// TestStatFSOfATempDirAgreesWithDf checks StatFS against df(1), which
// computes sizes from f_frsize too.
func TestStatFSOfATempDirAgreesWithDf(t *testing.T) {
	dir := t.TempDir()
	probe := NewFSProbe(dir, 10*time.Second, nil)
	tests := []struct {
		name string
		stat func() (FSStats, error)
	}{
		{"StatFS calls statfs directly", func() (FSStats, error) { return StatFS(dir) }},
		{"an FSProbe calls statfs in a goroutine", func() (FSStats, error) { return probe.Stat(t.Context()) }},
		{"an FSProbe calls statfs again once it has answered", func() (FSStats, error) { return probe.Stat(t.Context()) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := tt.stat()
			if err != nil {
				t.Fatal(err)
			}
			if st.Path != dir || st.CapacityBytes == 0 || st.AvailableBytes > st.FreeBytes || st.FreeBytes > st.CapacityBytes || st.InodesFree > st.Inodes {
				t.Fatalf("implausible: %+v", st)
			}
			out, err := exec.Command("df", "-B1", "--output=size,itotal", dir).Output()
			if err != nil {
				t.Skipf("df: %v", err) // df is coreutils; its absence is not nodestats' failure
			}
			f := strings.Fields(string(out))
			if len(f) != 4 {
				t.Fatalf("df output %q", out)
			}
			size, _ := strconv.ParseUint(f[2], 10, 64)
			itotal, _ := strconv.ParseUint(f[3], 10, 64)
			if st.CapacityBytes != size || st.Inodes != itotal {
				t.Errorf("capacity %d bytes / %d inodes, df says %d / %d", st.CapacityBytes, st.Inodes, size, itotal)
			}
		})
	}
}

func TestStatFSErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "absent")
	if _, err := StatFS(missing); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("a missing path: %v, want ErrNotExist naming it", err)
	}
	if _, err := NewFSProbe(missing, 0, nil).Stat(t.Context()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a probe of a missing path: %v, want ErrNotExist", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	hung := newHungStatfs()
	defer hung.release()
	if _, err := NewFSProbe(t.TempDir(), time.Hour, hung.statfs).Stat(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled context: %v, want context.Canceled", err)
	}
}

// hungStatfs is a statfs that blocks until released, like statfs(2) of a
// hung NFS or FUSE filesystem, and counts its calls.
type hungStatfs struct {
	calls atomic.Int32
	gate  chan struct{}
	once  sync.Once
}

func newHungStatfs() *hungStatfs { return &hungStatfs{gate: make(chan struct{})} }

func (h *hungStatfs) statfs(path string) (FSStats, error) {
	h.calls.Add(1)
	<-h.gate
	return FSStats{Path: path, CapacityBytes: 100, FreeBytes: 60, AvailableBytes: 50, Inodes: 10, InodesFree: 5}, nil
}

func (h *hungStatfs) release() { h.once.Do(func() { close(h.gate) }) }

// TestFSProbeOfAHungFilesystem: a probe whose statfs never answers times
// out with ErrTimeout (the filesystem is unknown), keeps one call in
// flight however often it is asked, and takes the late answer once the
// call returns.
func TestFSProbeOfAHungFilesystem(t *testing.T) {
	hung := newHungStatfs()
	defer hung.release()
	const bound = 20 * time.Millisecond
	p := NewFSProbe("/hung", bound, hung.statfs)

	before := runtime.NumGoroutine()
	const stats = 200
	for i := range stats {
		st, err := p.Stat(t.Context())
		if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "/hung") {
			t.Fatalf("stat %d of a hung filesystem: %v, want ErrTimeout naming the path", i, err)
		}
		if st != (FSStats{}) {
			t.Fatalf("stat %d of a hung filesystem returned %+v with its error: want nothing", i, st)
		}
	}
	if n := hung.calls.Load(); n != 1 {
		t.Errorf("%d statfs calls for %d stats of a hung filesystem, want 1 in flight", n, stats)
	}
	if after := runtime.NumGoroutine(); after > before+1 {
		t.Errorf("%d goroutines after %d stats, %d before", after, stats, before)
	}

	hung.release()
	// The call answers when its goroutine gets to run; until then Stat
	// still times out at once (bounded: a few seconds at worst).
	var st FSStats
	var err error
	for range 5000 {
		if st, err = p.Stat(t.Context()); !errors.Is(err, ErrTimeout) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err != nil || st.AvailableBytes != 50 {
		t.Fatalf("the stat after the call answered: %+v, %v; want its late answer", st, err)
	}
	if _, err := p.Stat(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := hung.calls.Load(); n != 2 {
		t.Errorf("%d statfs calls, want 2: a fresh call once the late answer was taken", n)
	}
}
