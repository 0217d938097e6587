package filesource

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// dirEvents are the changes of a directory's entries that can change its
// pods: a file written and closed, created (a symlink is never written),
// moved in (an editor's atomic rename) or out, removed; and the
// directory itself removed or moved away, which ends the watch.
const dirEvents = unix.IN_CLOSE_WRITE | unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_DELETE |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// errWatchGone says the watched directory was removed or moved away.
var errWatchGone = errors.New("the directory was removed or moved")

// watch is an inotify watch on one directory. Its events only say "read
// the directory again": they are not decoded beyond whether the watch
// went away.
type watch struct {
	dir string
	f   *os.File // the inotify descriptor, non-blocking, in Go's poller
}

func openWatch(dir string) (*watch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("watch %s: inotify_init1: %w", dir, err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, dirEvents); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("watch %s: inotify_add_watch: %w", dir, err)
	}
	// Non-blocking and wrapped in an os.File, a read waits in Go's
	// poller and Close ends it: no thread blocked in read(2).
	return &watch{dir: dir, f: os.NewFile(uintptr(fd), "inotify "+dir)}, nil
}

// run sends on changed after every batch of events (coalescing: changed
// has room for one) until Close, and then returns nil; or until the
// directory went away (errWatchGone) or the descriptor fails.
func (w *watch) run(changed chan<- struct{}) error {
	// Room for at least one event with the longest name.
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := w.f.Read(buf)
		if errors.Is(err, os.ErrClosed) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("watch %s: read inotify: %w", w.dir, err)
		}
		gone := false
		// struct inotify_event: wd int32, mask, cookie, len uint32, then
		// len bytes of name; decoded by hand, with no assumption about
		// the buffer's alignment. IN_Q_OVERFLOW (events lost) needs
		// nothing special: every batch means a full re-read anyway.
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			if mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0 {
				gone = true
			}
			off += unix.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(buf[off+12:]))
		}
		select {
		case changed <- struct{}{}:
		default:
		}
		if gone {
			return fmt.Errorf("watch %s: %w", w.dir, errWatchGone)
		}
	}
}

// Close ends run.
func (w *watch) Close() error { return w.f.Close() }
