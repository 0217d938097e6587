package tripwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups"

	"github.com/nodeguard/nodeguard/cgroups/cgstat"
)

// Files of the v2 mechanism.
const (
	fileHigh        = "memory.high"
	fileCurrent     = "memory.current"
	fileEvents      = "memory.events"
	fileEventsLocal = "memory.events.local"
)

// inotify tokens of the v2 loop.
const tokInotify = 0

// v2 is the cgroup v2 Tripwire: memory.high = threshold, and inotify on
// memory.events.local for the kernel's "high" events.
type v2 struct {
	*loop
	started bool
	events  string // fileEventsLocal, or fileEvents on old kernels

	mu        sync.Mutex // guards everything below
	dirfd     int
	ifd       int // inotify
	evfd      int // the events file, for re-reads
	hk        highKeeper
	threshold uint64
	lastHigh  uint64
	closed    bool
	buf       [512]byte
	ibuf      [4096]byte
}

func newV2(dir string, opts Options) (_ *v2, retErr error) {
	l, err := newLoop(dir, opts)
	if err != nil {
		return nil, err
	}
	t := &v2{loop: l, dirfd: -1, ifd: -1, evfd: -1, hk: highKeeper{dirfd: -1}}
	defer func() {
		if retErr != nil {
			// A memory.high left armed that load could not put back
			// yet goes back before the directory is let go.
			if err := t.hk.restore(); err != nil {
				t.log.Warn("tripwire: restore memory.high after a failed start", "dir", dir, "err", err)
			}
			t.closeAll()
		}
	}()
	if t.dirfd, err = openDir(dir); err != nil {
		return nil, fmt.Errorf("new v2 tripwire: %w", err)
	}
	// memory.high throttles the whole subtree: never the process that
	// runs the Tripwire.
	if where, in, err := processBeneath(t.dirfd, dir, opts.SelfPID); err != nil || in {
		if err == nil {
			err = fmt.Errorf("%w: memory.high on %s would throttle pid %d, in %s beneath it", ErrUnsupported, dir, opts.SelfPID, where)
		}
		return nil, fmt.Errorf("new v2 tripwire: %w", err)
	}
	// memory.high must exist and be writable later; keep its value to
	// restore (and put back what a Tripwire that did not close left).
	t.hk = newHighKeeper(dir, t.dirfd, opts)
	if err := t.hk.load(); err != nil {
		return nil, fmt.Errorf("new v2 tripwire: %w", err)
	}
	t.events = fileEventsLocal
	t.evfd, err = openAt(t.dirfd, dir, fileEventsLocal, unix.O_RDONLY)
	if errors.Is(err, ErrUnsupported) {
		t.events = fileEvents
		t.evfd, err = openAt(t.dirfd, dir, fileEvents, unix.O_RDONLY)
	}
	if err != nil {
		return nil, fmt.Errorf("new v2 tripwire: %w", err)
	}
	if t.lastHigh, err = t.readHigh(); err != nil {
		return nil, fmt.Errorf("new v2 tripwire: %w", err)
	}
	if t.ifd, err = unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK); err != nil {
		return nil, fmt.Errorf("new v2 tripwire: inotify_init1: %w", err)
	}
	name := dir + "/" + t.events
	if _, err := unix.InotifyAddWatch(t.ifd, name, unix.IN_MODIFY); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("%w: %w", ErrGone, err)
		}
		return nil, fmt.Errorf("new v2 tripwire: inotify_add_watch %s: %w", name, err)
	}
	if err := t.add(t.ifd, tokInotify, unix.EPOLLIN); err != nil {
		return nil, fmt.Errorf("new v2 tripwire: %w", err)
	}
	t.started = true
	go t.run(t.handle)
	return t, nil
}

// readHigh re-reads the "high" counter. Callers hold mu or own t alone.
func (t *v2) readHigh() (uint64, error) {
	raw, err := pread(t.evfd, t.buf[:])
	if err != nil {
		return 0, fmt.Errorf("read %s/%s: %w", t.dir, t.events, err)
	}
	return cgstat.ParseCounter(raw, "high", t.dir+"/"+t.events)
}

// Arm writes memory.high = threshold. The first Arm keeps the value it
// replaces, which Close restores.
func (t *v2) Arm(threshold uint64) error {
	if err := checkThreshold(threshold, t.dir+"/"+fileHigh); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("arm tripwire on %s: %w", t.dir, ErrClosed)
	}
	// The baseline is read before the write: when usage is already above
	// threshold, the write itself raises a "high" event, which is a
	// crossing of this threshold and must fire.
	base, berr := t.readHigh()
	if _, err := t.hk.write(strconv.FormatUint(threshold, 10)); err != nil {
		return fmt.Errorf("arm tripwire: %w", err)
	}
	t.threshold = threshold
	if berr == nil {
		t.lastHigh = base
	}
	return nil
}

// handle drains the inotify queue and re-reads the high counter; an
// increase while armed is a fire.
func (t *v2) handle(_ int32, _ uint32, at time.Time) error {
	t.mu.Lock()
	removed := t.drainInotify()
	if removed {
		t.mu.Unlock()
		return fmt.Errorf("watch %s/%s: %w", t.dir, t.events, ErrGone)
	}
	h, err := t.readHigh()
	armed, threshold, last := t.hk.written != "", t.threshold, t.lastHigh
	if err == nil && h > last {
		t.lastHigh = h
	}
	t.mu.Unlock()
	switch {
	case err != nil && cgroups.Gone(err):
		return fmt.Errorf("watch %s/%s: %w: %w", t.dir, t.events, ErrGone, err)
	case err != nil:
		// The file changed and cannot be read: deliver, as v1 does.
		t.readErrs.Add(1)
	case !armed || h <= last:
		t.ignored.Add(1)
		return nil
	}
	t.deliver(Fire{At: at, Dir: t.dir, Kind: KindMemoryHigh, Count: h, Threshold: threshold})
	return nil
}

// drainInotify reads every queued inotify event and reports whether the
// watch went away (the file, so the cgroup, was removed).
func (t *v2) drainInotify() bool { return drainInotify(t.ifd, t.ibuf[:]) }

// drainInotify reads every event queued on the inotify descriptor ifd
// into buf and reports whether a watch went away.
func drainInotify(ifd int, buf []byte) (removed bool) {
	for {
		n, err := unix.Read(ifd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return removed
		}
		// struct inotify_event: wd int32, mask, cookie, len uint32,
		// then len bytes of name; decoded by hand, so no alignment
		// assumption about the buffer.
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			if mask&(unix.IN_IGNORED|unix.IN_DELETE_SELF) != 0 {
				removed = true
			}
			off += unix.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(buf[off+12:]))
		}
	}
}

// Close stops the reader and restores memory.high.
func (t *v2) Close() error {
	if !t.shutdown(&t.mu, &t.closed, t.started) {
		return nil
	}
	rerr := t.restore()
	return errors.Join(rerr, t.closeAll())
}

func (t *v2) restore() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.hk.restore()
}

func (t *v2) closeAll() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closeWith(&t.ifd, &t.evfd, &t.dirfd)
}
