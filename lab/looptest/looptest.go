// Package looptest attaches loop devices for tests that need a real block
// device: a sparse file in the test's temporary directory, bound to a free
// /dev/loopN with the loop ioctls (LOOP_CTL_GET_FREE, LOOP_CONFIGURE), so
// no losetup binary is needed.
//
// Invariants: only the device this package attached is ever detached, by
// the descriptor it configured (LOOP_CLR_FD), in the test's cleanup; the
// device is configured with LO_FLAGS_AUTOCLEAR, so a test binary killed
// before its cleanup still leaves no device behind once its descriptors
// are closed and nothing has it mounted.
package looptest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

// attachTries bounds the race with other processes for a free device: the
// number LOOP_CTL_GET_FREE returns may be taken before this process binds
// it (EBUSY), and then it asks again.
const attachTries = 16

// Attach makes a sparse file of size bytes in a temporary directory of t,
// binds it to a free loop device, and returns the device's path. The
// device is detached in t's cleanup (after the cleanups registered later,
// such as unmounts). It skips t when not root (fails it with
// NODEGUARD_REQUIRE_PRIVILEGED=1) or when the kernel has no loop driver.
func Attach(t testing.TB, size int64) string {
	t.Helper()
	cgtest.RequirePrivileged(t)
	backing := filepath.Join(t.TempDir(), "disk.img")
	f, err := os.OpenFile(backing, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close() // the loop device holds its own reference
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		cgtest.Need(t, false, "no /dev/loop-control: the kernel has no loop driver")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()

	for range attachTries {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			t.Fatalf("LOOP_CTL_GET_FREE: %v", err)
		}
		path := fmt.Sprintf("/dev/loop%d", n)
		dev, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatalf("open %s: %v", path, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(f.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:], backing)
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		if errors.Is(err, unix.EBUSY) {
			dev.Close()
			continue // taken by someone else meanwhile
		}
		if err != nil {
			dev.Close()
			t.Fatalf("LOOP_CONFIGURE %s with %s: %v", path, backing, err)
		}
		t.Logf("attached %s to %s (%d bytes)", path, backing, size)
		t.Cleanup(func() { detach(t, dev, path) })
		return path
	}
	t.Fatalf("no free loop device after %d tries", attachTries)
	return ""
}

// detach unbinds the device this package configured, through the
// descriptor it configured it with. A device still mounted stays bound
// (EBUSY) until its last user goes, and autoclear frees it then.
func detach(t testing.TB, dev *os.File, path string) {
	err := unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_CLR_FD, 0)
	if err != nil && !errors.Is(err, unix.ENXIO) {
		t.Errorf("detach %s: %v", path, err)
	}
	dev.Close()
}

// NeedTools skips t (fails it with NODEGUARD_REQUIRE_PRIVILEGED=1) unless
// every named program is in $PATH: what formatting a device runs
// (mkfs.ext4 and blkid from e2fsprogs and util-linux, which
// scripts/deps.sh installs).
func NeedTools(t testing.TB, names ...string) {
	t.Helper()
	for _, n := range names {
		_, err := exec.LookPath(n)
		cgtest.Need(t, err == nil, fmt.Sprintf("no %s in $PATH (%v): scripts/deps.sh installs it", n, err))
	}
}
