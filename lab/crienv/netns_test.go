package crienv

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

// inNetNS runs fn on a locked thread inside the network namespace file,
// and returns the thread to its own namespace afterwards.
func inNetNS(file string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer unix.Close(orig)
		ns, err := unix.Open(file, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer unix.Close(ns)
		if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		ferr := fn()
		if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
			errc <- err // stay locked: the thread is retired
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

func linkFlags(name string) (uint16, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return 0, err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return 0, err
	}
	return ifr.Uint16(), nil
}

func nsID(path string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino), nil
}

func TestNewNetNS(t *testing.T) {
	cgtest.RequirePrivileged(t)
	file := filepath.Join(t.TempDir(), "netns")
	self, err := nsID("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	if err := newNetNS(file); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(file, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", file, err)
		}
	})
	id, err := nsID(file)
	if err != nil {
		t.Fatal(err)
	}
	if id == self {
		t.Fatalf("%s is this process's own network namespace", file)
	}

	t.Run("lo is up in it and is its only interface", func(t *testing.T) {
		var flags uint16
		var ifs []string
		err := inNetNS(file, func() error {
			var err error
			if flags, err = linkFlags("lo"); err != nil {
				return err
			}
			// /proc/net/dev: two header lines, then "  name: counters".
			b, err := os.ReadFile("/proc/thread-self/net/dev")
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			for _, l := range lines[min(2, len(lines)):] {
				name, _, _ := strings.Cut(strings.TrimSpace(l), ":")
				ifs = append(ifs, name)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if flags&unix.IFF_UP == 0 {
			t.Errorf("lo flags %#x lack IFF_UP", flags)
		}
		if len(ifs) != 1 || ifs[0] != "lo" {
			t.Errorf("interfaces %v, want only lo", ifs)
		}
	})

	t.Run("every thread of this process stays in its own namespace", func(t *testing.T) {
		// Many goroutines on many threads: none may see the new one.
		var wg sync.WaitGroup
		bad := make(chan string, 64)
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				if got, err := nsID("/proc/thread-self/ns/net"); err != nil || got != self {
					bad <- fmt.Sprintf("thread %d in %s (%v)", unix.Gettid(), got, err)
				}
			}()
		}
		wg.Wait()
		close(bad)
		for b := range bad {
			t.Error(b)
		}
		if got, _ := nsID("/proc/self/ns/net"); got != self {
			t.Errorf("/proc/self/ns/net (the main thread) moved to %s", got)
		}
	})

	t.Run("an existing file is refused", func(t *testing.T) {
		if err := newNetNS(file); err == nil {
			t.Fatal("newNetNS reused an existing file")
		}
	})
}
