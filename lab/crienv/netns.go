package crienv

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// newNetNS creates a network namespace, brings its loopback up and makes it
// persistent by bind-mounting it on file (created empty), like `unshare
// --net=FILE`. The work runs on a goroutine locked to its OS thread, which
// returns to its original namespace before unlocking. If it cannot return,
// the goroutine exits still locked, so the runtime retires the thread
// instead of running other goroutines in the new namespace. (It must
// return rather than always retire: if the thread is the main thread, the
// runtime parks it instead of ending it, and /proc/self/ns/net and
// /proc/self/net would then show the new namespace for the whole process.)
// Undo with unix.Unmount(file, unix.MNT_DETACH) and os.Remove.
func newNetNS(file string) error {
	f, err := os.OpenFile(file, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return fmt.Errorf("create netns file: %w", err)
	}
	f.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open this thread's network namespace: %w", err)
			return
		}
		defer unix.Close(orig)
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("unshare network namespace: %w", err)
			return
		}
		src := "/proc/thread-self/ns/net"
		err = unix.Mount(src, file, "", unix.MS_BIND, "")
		if err != nil {
			err = fmt.Errorf("bind-mount %s on %s: %w", src, file, err)
		} else {
			err = setLinkUp("lo")
		}
		if serr := unix.Setns(orig, unix.CLONE_NEWNET); serr != nil {
			// Stay locked: the thread is retired with this goroutine.
			errc <- errors.Join(err, fmt.Errorf("return to the original network namespace: %w", serr))
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	if err := <-errc; err != nil {
		unix.Unmount(file, unix.MNT_DETACH)
		os.Remove(file)
		return err
	}
	return nil
}

// setLinkUp sets IFF_UP on the interface name in the calling thread's
// network namespace.
func setLinkUp(name string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("set %s up: socket: %w", name, err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return fmt.Errorf("set %s up: %w", name, err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("set %s up: get flags: %w", name, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("set %s up: set flags: %w", name, err)
	}
	return nil
}
