package pressure_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/pressure"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// envHungFS marks the re-executed test binary that runs in its own mount
// namespace.
const envHungFS = "NODEGUARD_TEST_HUNG_FS"

// mountHungFS mounts, at a new directory, a FUSE filesystem whose server
// never answers: the kernel holds every request, statfs(2) included,
// until the connection is initialised, which never happens. Closing
// the returned descriptor aborts the connection (the held calls then fail
// with ENOTCONN). It must run in a private mount namespace: a hung mount
// in the host's would hang every df on the machine.
func mountHungFS(t *testing.T) (dir string, fuse int) {
	t.Helper()
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		t.Fatalf("make the test's mount namespace private: %v", err)
	}
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open /dev/fuse: %v", err)
	}
	dir = filepath.Join(t.TempDir(), "hung")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0", fd)
	if err := unix.Mount("nodeguard-hung", dir, "fuse.nodeguard-hung", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		unix.Close(fd)
		t.Fatalf("mount a FUSE filesystem at %s: %v", dir, err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir, fd
}

// kernelHasFUSE reports whether the running kernel knows the fuse
// filesystem (built in, or its module loaded).
func kernelHasFUSE(t *testing.T) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[len(f)-1] == "fuse" {
			return true
		}
	}
	return false
}

// TestSnapshotOfAHungNodeFS takes snapshots while the nodefs is a
// filesystem that never answers statfs(2) (a hung NFS server, a dead
// FUSE daemon). Each snapshot must return, with the nodefs signals left
// out (unknown: neither full nor empty) and an error naming the
// filesystem, and the snapshots must not pile up goroutines stuck in
// statfs: at most one per filesystem.
func TestSnapshotOfAHungNodeFS(t *testing.T) {
	cgtest.RequirePrivileged(t)
	if !kernelHasFUSE(t) {
		// The VM lane's 6.1 kernel has FUSE as a module, and its guest
		// loads none; TestSnapshotWithAStatfsThatBlocks covers the same
		// bound with an injected statfs on every kernel.
		t.Skip("this kernel has no FUSE (not in /proc/filesystems): no filesystem that never answers can be mounted")
	}
	if os.Getenv(envHungFS) == "" {
		// Re-run this test in a new mount namespace, so that the hung
		// mount is seen by nobody else on the machine.
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSnapshotOfAHungNodeFS$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), envHungFS+"=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
		out, err := cmd.CombinedOutput()
		t.Logf("in its own mount namespace:\n%s", out)
		if err != nil {
			t.Fatalf("the test in its own mount namespace: %v", err)
		}
		return
	}

	dir, fuse := mountHungFS(t)
	parent := cgtest.New(t)
	snapper, err := pressure.New(pressure.Config{Layout: parent.Layout(), Roots: []string{parent.Rel()}, NodeFSPath: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer snapper.Close()
	defer unix.Close(fuse) // first: frees whatever is stuck in statfs

	// A generous bound for a test on a shared machine: this is not a
	// timing assertion, it only tells a hang from an answer.
	const hang = 20 * time.Second
	take := func(ctx context.Context) *pressure.Snapshot {
		t.Helper()
		ch := make(chan *pressure.Snapshot, 1)
		go func() { ch <- snapper.Snapshot(ctx, time.Now()) }()
		select {
		case s := <-ch:
			return s
		case <-time.After(hang):
			t.Fatalf("Snapshot has not returned after %v: a filesystem that does not answer statfs blocks it", hang)
			return nil
		}
	}
	check := func(s *pressure.Snapshot) {
		t.Helper()
		for _, sig := range []nodestats.Signal{nodestats.SignalNodeFsAvailable, nodestats.SignalNodeFsInodesFree} {
			if o, ok := s.Signal(sig); ok {
				t.Errorf("%s observed as %d of %d on a filesystem that does not answer: want it left out", sig, o.Available, o.Capacity)
			}
		}
		if _, ok := s.Signal(nodestats.SignalMemoryAvailable); !ok {
			t.Errorf("memory.available missing: a hung nodefs must not cost the other signals (errors %v)", s.Errors)
		}
		if len(s.Errors) == 0 {
			t.Error("no error says that the nodefs is unknown")
		}
	}

	// Callers that bound each snapshot: the call must not leave one
	// goroutine behind per snapshot.
	before := runtime.NumGoroutine()
	const snapshots = 20
	for range snapshots {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		check(take(ctx))
		cancel()
	}
	if after := runtime.NumGoroutine(); after > before+2 {
		t.Errorf("%d goroutines after %d snapshots, %d before: statfs calls pile up on a hung filesystem", after, snapshots, before)
	}

	// The eviction manager's context: cancellable, without a deadline.
	start := time.Now()
	check(take(t.Context()))
	t.Logf("a snapshot without a deadline returned after %v", time.Since(start))
}

// TestSnapshotWithAStatfsThatBlocks injects a statfs that never answers for
// the nodefs while the imagefs answers: every snapshot returns, the
// nodefs signals are left out with an error saying the filesystem is
// unknown, the imagefs signals are there, and across many snapshots one
// statfs call stays in flight.
func TestSnapshotWithAStatfsThatBlocks(t *testing.T) {
	cgtest.RequirePrivileged(t)
	parent := cgtest.New(t)
	nodeFS, imageFS := "/hung/nodefs", t.TempDir()
	gate := make(chan struct{})
	defer close(gate)
	var hungCalls atomic.Int32
	statfs := func(path string) (nodestats.FSStats, error) {
		if path == nodeFS {
			hungCalls.Add(1)
			<-gate
		}
		return nodestats.StatFS(path)
	}
	snapper, err := pressure.New(pressure.Config{
		Layout: parent.Layout(), Roots: []string{parent.Rel()},
		NodeFSPath: nodeFS, ImageFSPath: imageFS,
		StatFSTimeout: 10 * time.Millisecond, StatFS: statfs,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer snapper.Close()

	before := runtime.NumGoroutine()
	const snapshots = 100
	for i := range snapshots {
		s := snapper.Snapshot(t.Context(), time.Now())
		for _, sig := range []nodestats.Signal{nodestats.SignalNodeFsAvailable, nodestats.SignalNodeFsInodesFree} {
			if o, ok := s.Signal(sig); ok {
				t.Fatalf("snapshot %d: %s observed as %d of %d on a filesystem that does not answer: want it left out", i, sig, o.Available, o.Capacity)
			}
		}
		for _, sig := range []nodestats.Signal{nodestats.SignalImageFsAvailable, nodestats.SignalImageFsInodesFree} {
			if _, ok := s.Signal(sig); !ok {
				t.Fatalf("snapshot %d: no %s: the imagefs answers (errors %v)", i, sig, s.Errors)
			}
		}
		timedOut := false
		for _, err := range s.Errors {
			timedOut = timedOut || errors.Is(err, nodestats.ErrTimeout) && strings.Contains(err.Error(), nodeFS)
		}
		if !timedOut {
			t.Fatalf("snapshot %d: errors %v, want one matching ErrTimeout naming %s", i, s.Errors, nodeFS)
		}
	}
	if n := hungCalls.Load(); n != 1 {
		t.Errorf("%d statfs calls of the hung nodefs in %d snapshots, want 1 in flight", n, snapshots)
	}
	if after := runtime.NumGoroutine(); after > before+2 {
		t.Errorf("%d goroutines after %d snapshots, %d before", after, snapshots, before)
	}
}
