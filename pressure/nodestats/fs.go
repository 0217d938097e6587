package nodestats

import (
	"context"
	"fmt"
	"math/bits"

	"golang.org/x/sys/unix"
)

// FSStats is what statfs(2) says about the filesystem holding a path, as
// cAdvisor reports it to the kubelet (cAdvisor fs/fs.go getVfsStats, and
// its successor with a timeout, fs/vfs GetVfsStats): byte counts are block
// counts times the fragment size f_frsize, inode counts are taken as they
// are.
type FSStats struct {
	Path           string // the path asked about
	CapacityBytes  uint64 // f_blocks * f_frsize
	FreeBytes      uint64 // f_bfree * f_frsize: free, including blocks reserved for root
	AvailableBytes uint64 // f_bavail * f_frsize: free to unprivileged users; the kubelet's "available"
	Inodes         uint64 // f_files; 0 on filesystems without an inode limit (btrfs, many FUSE)
	InodesFree     uint64 // f_ffree
}

// NodeFS returns the statistics of the kubelet's nodefs: the filesystem of
// the kubelet root directory (rootDir, e.g. /var/lib/kubelet), which holds
// pod volumes, logs and, without a separate imagefs, container layers. The
// kubelet asks cAdvisor for RootFsInfo, the filesystem of its root
// directory (pkg/kubelet/stats: rootFsInfo).
func NodeFS(ctx context.Context, rootDir string) (FSStats, error) {
	return StatFS(ctx, rootDir)
}

// ImageFS returns the statistics of the kubelet's imagefs: the filesystem
// holding the container runtime's images (path, e.g. containerd's root
// /var/lib/containerd). With the CRI stats provider the kubelet takes the
// mountpoint the runtime names in ImageFsInfo and asks cAdvisor for that
// directory's filesystem; when it is the nodefs the two signals see the
// same numbers.
func ImageFS(ctx context.Context, path string) (FSStats, error) {
	return StatFS(ctx, path)
}

// StatFS returns the statistics of the filesystem holding path. statfs(2)
// can block for as long as a hung network filesystem does, so when ctx can
// be cancelled the call runs in its own goroutine and StatFS returns when
// ctx is done; the goroutine then finishes whenever the kernel returns.
// cAdvisor bounds the same call with a 2 s timeout for the same reason.
func StatFS(ctx context.Context, path string) (FSStats, error) {
	if ctx.Done() == nil {
		return statFS(path)
	}
	if err := ctx.Err(); err != nil {
		return FSStats{}, fmt.Errorf("statfs %s: %w", path, err)
	}
	type result struct {
		st  FSStats
		err error
	}
	ch := make(chan result, 1) // buffered: a late answer must not block the goroutine
	go func() {
		st, err := statFS(path)
		ch <- result{st, err}
	}()
	select {
	case r := <-ch:
		return r.st, r.err
	case <-ctx.Done():
		return FSStats{}, fmt.Errorf("statfs %s: %w", path, ctx.Err())
	}
}

func statFS(path string) (FSStats, error) {
	var s unix.Statfs_t
	if err := unix.Statfs(path, &s); err != nil {
		return FSStats{}, fmt.Errorf("statfs %s: %w", path, err)
	}
	return fsStatsOf(path, &s)
}

// fsStatsOf converts a statfs result. A product that overflows 64 bits
// cannot describe a real filesystem and is reported as malformed.
func fsStatsOf(path string, s *unix.Statfs_t) (FSStats, error) {
	if s.Frsize <= 0 {
		return FSStats{}, &ParseError{File: path, Msg: fmt.Sprintf("statfs fragment size %d", s.Frsize)}
	}
	frsize := uint64(s.Frsize)
	mul := func(n uint64) (uint64, bool) {
		hi, lo := bits.Mul64(n, frsize)
		return lo, hi == 0
	}
	capacity, ok1 := mul(s.Blocks)
	free, ok2 := mul(s.Bfree)
	avail, ok3 := mul(s.Bavail)
	if !ok1 || !ok2 || !ok3 {
		return FSStats{}, &ParseError{File: path, Msg: "statfs byte counts overflow 64 bits"}
	}
	return FSStats{
		Path:           path,
		CapacityBytes:  capacity,
		FreeBytes:      free,
		AvailableBytes: avail,
		Inodes:         s.Files,
		InodesFree:     s.Ffree,
	}, nil
}
