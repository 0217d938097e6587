package nodestats

import (
	"context"
	"fmt"
	"math/bits"
	"sync"
	"time"

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

// DefaultStatFSTimeout bounds how long a Snapshot waits for the statfs(2)
// of a node filesystem. A local filesystem answers in microseconds, and
// even a busy one within milliseconds; one that takes longer is hung (a
// dead NFS server or FUSE daemon). cAdvisor waits 2 s for the same call,
// but its statfs runs on a housekeeping goroutine, while nodeguard's is on
// the eviction loop, whose safety tick is 1 s: a hung nodefs may cost that
// loop half a tick once, not a tick every tick.
const DefaultStatFSTimeout = 500 * time.Millisecond

// FSProbe reads the statistics of one filesystem (the kubelet's nodefs:
// the filesystem of its root directory, which holds pod volumes, logs
// and, without a separate imagefs, container layers; or its imagefs: the
// filesystem of the runtime's image store) with a bound, for the
// pressure tick.
//
// statfs(2) blocks for as long as a hung network or FUSE filesystem does,
// and nothing can cancel it. So the call runs in its own goroutine, Stat
// waits for it until the call's bound, and an FSProbe never has more
// than one call in flight: while one is hung, Stat returns ErrTimeout at
// once instead of starting another. When the hung call returns, the next
// Stat takes its answer, and the one after starts a fresh call. An
// FSProbe is safe for concurrent use.
type FSProbe struct {
	path    string
	timeout time.Duration
	statfs  func(string) (FSStats, error)

	mu   sync.Mutex
	call *fsCall // in flight, or done and not yet taken
}

// fsCall is one statfs in its goroutine; st and err are set before done
// is closed.
type fsCall struct {
	started time.Time
	done    chan struct{}
	st      FSStats
	err     error
}

// NewFSProbe returns a probe of the filesystem holding path. timeout is
// the bound of one call (DefaultStatFSTimeout when 0); statfs replaces
// StatFS, for tests (nil: StatFS).
func NewFSProbe(path string, timeout time.Duration, statfs func(string) (FSStats, error)) *FSProbe {
	if timeout <= 0 {
		timeout = DefaultStatFSTimeout
	}
	if statfs == nil {
		statfs = StatFS
	}
	return &FSProbe{path: path, timeout: timeout, statfs: statfs}
}

// Path is the path the probe stats.
func (p *FSProbe) Path() string { return p.path }

// Stat returns the filesystem's statistics, or an error: one matching
// ErrTimeout when the call in flight has not answered within its bound
// (the filesystem is then unknown: neither full nor empty), the context's
// error when ctx ends first, or statfs's own.
func (p *FSProbe) Stat(ctx context.Context) (FSStats, error) {
	p.mu.Lock()
	c := p.call
	if c == nil {
		c = &fsCall{started: time.Now(), done: make(chan struct{})}
		p.call = c
		go func() {
			c.st, c.err = p.statfs(p.path)
			close(c.done)
		}()
	}
	p.mu.Unlock()

	take := func() (FSStats, error) {
		p.mu.Lock()
		if p.call == c {
			p.call = nil
		}
		p.mu.Unlock()
		return c.st, c.err
	}
	select {
	case <-c.done:
		return take()
	default:
	}
	left := p.timeout - time.Since(c.started)
	if left <= 0 {
		return FSStats{}, p.timedOut(c) // hung since an earlier Stat
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-c.done:
		return take()
	case <-t.C:
		return FSStats{}, p.timedOut(c)
	case <-ctx.Done():
		return FSStats{}, fmt.Errorf("statfs %s: %w", p.path, ctx.Err())
	}
}

func (p *FSProbe) timedOut(c *fsCall) error {
	return fmt.Errorf("statfs %s: %w: no answer for %v (bound %v), the filesystem is unknown until it answers",
		p.path, ErrTimeout, time.Since(c.started).Round(time.Millisecond), p.timeout)
}

// StatFS returns the statistics of the filesystem holding path with one
// statfs(2), which blocks for as long as the filesystem does: the
// pressure tick goes through an FSProbe.
func StatFS(path string) (FSStats, error) {
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
