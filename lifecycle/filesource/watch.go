package filesource

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"

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

// watch is an inotify watch on one directory. Its events say "read the
// directory again", and whether that may be at once (settledBatch) or the
// watch went away.
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
// directory went away (errWatchGone) or the descriptor fails. What it
// sends says whether the batch is settled (settledBatch): every event in
// it a manifest written and closed or moved in. Two batches that meet in
// the channel merge, settled only if both were.
func (w *watch) run(changed chan bool) error {
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
		settled, gone := settledBatch(buf[:n])
		select {
		case changed <- settled:
		default:
			select {
			case pending := <-changed:
				settled = settled && pending
			default:
			}
			select {
			case changed <- settled:
			default:
			}
		}
		if gone {
			return fmt.Errorf("watch %s: %w", w.dir, errWatchGone)
		}
	}
}

// settledBatch decodes one read of inotify events: struct inotify_event
// (wd int32, mask, cookie, len uint32, then len bytes of NUL-padded name),
// by hand, with no assumption about the buffer's alignment. A batch is
// settled when it brought new manifests (isManifest) that are complete:
// moved in (an atomic rename), or created, written and closed within the
// batch; files that are not manifests are left out. A pass may apply such
// a change at once: no running pod can be lost to a file read half-way.
// Anything else is not: a manifest closed after it was created in an
// earlier batch, or rewritten in place (its writer may append more, as
// `cat a > f; cat b >> f` does, and a pass between the two would stop b's
// running pods); a creation not closed yet; a manifest removed or moved
// out (maybe an editor's save under way); a lost event (IN_Q_OVERFLOW).
// gone says the directory itself went away.
func settledBatch(b []byte) (settled, gone bool) {
	// changed: a new manifest was closed after writing or moved in.
	// open: manifests created in this batch and not closed yet (a file
	// copied in is created, written and closed, often in one batch).
	changed, unsettled := false, false
	var open map[string]bool
	for off := 0; off+unix.SizeofInotifyEvent <= len(b); {
		mask := binary.NativeEndian.Uint32(b[off+4:])
		nameLen := int(binary.NativeEndian.Uint32(b[off+12:]))
		start := off + unix.SizeofInotifyEvent
		end := min(start+nameLen, len(b))
		name := strings.TrimRight(string(b[start:end]), "\x00")
		off = start + nameLen
		switch {
		case mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0:
			gone, unsettled = true, true
		case mask&unix.IN_Q_OVERFLOW != 0:
			unsettled = true
		case mask&unix.IN_ISDIR != 0 || !isManifest(name):
			// Not a manifest (a temporary file, an editor's backup, a
			// directory): it changes no pods.
		case mask&unix.IN_CREATE != 0:
			if open == nil {
				open = map[string]bool{}
			}
			open[name] = true
		case mask&unix.IN_CLOSE_WRITE != 0:
			if !open[name] {
				unsettled = true // created in an earlier batch, or rewritten in place
			}
			delete(open, name)
			changed = true
		case mask&unix.IN_MOVED_TO != 0:
			changed = true
		default: // a manifest removed or moved out
			unsettled = true
		}
	}
	return changed && !unsettled && len(open) == 0, gone
}

// Close ends run.
func (w *watch) Close() error { return w.f.Close() }
