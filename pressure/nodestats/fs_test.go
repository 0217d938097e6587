package nodestats

import (
	"context"
	"errors"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	tests := []struct {
		name string
		stat func(context.Context, string) (FSStats, error)
		ctx  context.Context
	}{
		{"StatFS without a deadline calls statfs directly", StatFS, context.Background()},
		{"StatFS with a deadline calls statfs in a goroutine", StatFS, ctx},
		{"NodeFS is the statfs of the kubelet root dir", NodeFS, ctx},
		{"ImageFS is the statfs of the image store", ImageFS, ctx},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := tt.stat(tt.ctx, dir)
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
	if _, err := StatFS(context.Background(), missing); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("a missing path: %v, want ErrNotExist naming it", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := StatFS(ctx, t.TempDir()); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled context: %v, want context.Canceled", err)
	}
}
