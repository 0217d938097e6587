package netplumb

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NewNetNS creates a network namespace, sets its loopback up and makes it
// persistent by bind-mounting it on file, which must not exist (like `ip
// netns add` or `unshare --net=FILE`). The work runs on a goroutine locked
// to its OS thread, which returns to its original namespace before
// unlocking; if it cannot return, the goroutine exits still locked and the
// Go runtime retires the thread rather than run other goroutines in the
// new namespace. Undo with RemoveNetNS.
func NewNetNS(file string) error {
	f, err := os.OpenFile(file, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return fmt.Errorf("netplumb: create netns file: %w", err)
	}
	f.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open this thread's network namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("unshare network namespace: %w", err)
			return
		}
		const self = "/proc/thread-self/ns/net"
		err = unix.Mount(self, file, "", unix.MS_BIND, "")
		if err != nil {
			err = fmt.Errorf("bind-mount %s on %s: %w", self, file, err)
		} else {
			err = loopbackUp()
		}
		if serr := netns.Set(orig); serr != nil {
			// Stay locked: the thread is retired with this goroutine.
			errc <- errors.Join(err, fmt.Errorf("return to the original network namespace: %w", serr))
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	if err := <-errc; err != nil {
		return errors.Join(fmt.Errorf("netplumb: new netns %s: %w", file, err), RemoveNetNS(file))
	}
	return nil
}

// loopbackUp sets lo up in the calling thread's network namespace.
func loopbackUp() error {
	h, err := netlink.NewHandle()
	if err != nil {
		return fmt.Errorf("open netlink: %w", err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find lo: %w", err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("set lo up: %w", err)
	}
	return nil
}

// RemoveNetNS undoes NewNetNS: it detaches the bind mount on file (if any)
// and removes the file (if it exists). The namespace itself goes when the
// last process and file descriptor holding it are gone. Removing what is
// already gone is not an error.
func RemoveNetNS(file string) error {
	var errs []error
	if err := unix.Unmount(file, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		errs = append(errs, fmt.Errorf("netplumb: unmount %s: %w", file, err))
	}
	if err := os.Remove(file); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("netplumb: remove %s: %w", file, err))
	}
	return errors.Join(errs...)
}

// inNetNS runs fn on a thread in the network namespace at path, or on the
// calling goroutine if path is "". Processes fn starts (CNI plugins)
// inherit the namespace.
func inNetNS(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	n, err := ns.GetNS(path)
	if err != nil {
		return fmt.Errorf("netplumb: open netns %s: %w", path, err)
	}
	defer n.Close()
	return n.Do(func(ns.NetNS) error { return fn() })
}

// nsHandle is a netlink handle in one namespace plus the namespace's fd
// (for netns ids). The calling thread's namespace never changes.
type nsHandle struct {
	*netlink.Handle
	ns netns.NsHandle
}

// openNS opens a netlink handle in the namespace at path; "" is this
// process's own namespace.
func openNS(path string) (*nsHandle, error) {
	if path == "" {
		path = "/proc/self/ns/net"
	}
	n, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("netplumb: open netns %s: %w", path, err)
	}
	h, err := netlink.NewHandleAt(n)
	if err != nil {
		n.Close()
		return nil, fmt.Errorf("netplumb: open netlink in netns %s: %w", path, err)
	}
	return &nsHandle{Handle: h, ns: n}, nil
}

func (h *nsHandle) Close() {
	h.Handle.Close()
	h.ns.Close()
}

// dumpRetries bounds retries of a netlink dump that the kernel interrupted
// because the table changed under it (NLM_F_DUMP_INTR): busy nodes change
// links constantly, and three consecutive interruptions mean something is
// wrong rather than busy.
const dumpRetries = 3

// retryDump runs a netlink dump until it is not interrupted.
func retryDump[T any](f func() (T, error)) (T, error) {
	var v T
	var err error
	for range dumpRetries {
		v, err = f()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return v, err
		}
	}
	return v, err
}
