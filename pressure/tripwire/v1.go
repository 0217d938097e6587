package tripwire

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups"

	"github.com/nodeguard/nodeguard/cgroups/cgstat"
)

// Files of the v1 mechanism.
const (
	fileUsage   = "memory.usage_in_bytes"
	fileControl = "cgroup.event_control"
)

// v1 is the cgroup v1 Tripwire: one eventfd registered on
// memory.usage_in_bytes through cgroup.event_control.
type v1 struct {
	*loop
	started bool

	mu        sync.Mutex // guards everything below; the reader holds it while it reads efd
	dirfd     int
	usage     int // memory.usage_in_bytes, for registration and re-reads
	control   int // cgroup.event_control, write only
	efd       int // the armed eventfd; -1 before Arm
	gen       int32
	threshold uint64
	closed    bool
	buf       [64]byte
}

func newV1(dir string, opts Options) (_ *v1, retErr error) {
	l, err := newLoop(dir, opts)
	if err != nil {
		return nil, err
	}
	t := &v1{loop: l, dirfd: -1, usage: -1, control: -1, efd: -1}
	defer func() {
		if retErr != nil {
			t.closeAll()
		}
	}()
	if t.dirfd, err = openDir(dir); err != nil {
		return nil, fmt.Errorf("new v1 tripwire: %w", err)
	}
	if t.usage, err = openAt(t.dirfd, dir, fileUsage, unix.O_RDONLY); err != nil {
		return nil, fmt.Errorf("new v1 tripwire: %w", err)
	}
	if t.control, err = openAt(t.dirfd, dir, fileControl, unix.O_WRONLY); err != nil {
		return nil, fmt.Errorf("new v1 tripwire: %w", err)
	}
	t.started = true
	go t.run(t.handle)
	return t, nil
}

// Arm registers a new eventfd at threshold, then closes the previous one
// (the kernel drops its registration when it sees the close).
func (t *v1) Arm(threshold uint64) error {
	if err := checkThreshold(threshold, t.dir+"/"+fileControl); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("arm tripwire on %s: %w", t.dir, ErrClosed)
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("arm tripwire on %s: eventfd: %w", t.dir, err)
	}
	spec := strconv.Itoa(efd) + " " + strconv.Itoa(t.usage) + " " + strconv.FormatUint(threshold, 10)
	if err := writeAll(t.control, spec); err != nil {
		unix.Close(efd)
		return fmt.Errorf("arm tripwire: write %q to %s/%s: %w", spec, t.dir, fileControl, err)
	}
	gen := (t.gen + 1) & 0x7fffffff
	if err := t.add(efd, gen, unix.EPOLLIN); err != nil {
		unix.Close(efd)
		return fmt.Errorf("arm tripwire at %d: %w", threshold, err)
	}
	if t.efd >= 0 {
		t.del(t.efd)
		unix.Close(t.efd)
	}
	t.efd, t.gen, t.threshold = efd, gen, threshold
	return nil
}

// writeAll writes s to fd in one write, as cgroup files require.
func writeAll(fd int, s string) error {
	for {
		_, err := unix.Write(fd, []byte(s))
		if err != unix.EINTR {
			return err
		}
	}
}

// handle reads the eventfd counter and re-reads usage to tell an upward
// crossing from a downward one (see classifyV1).
func (t *v1) handle(tok int32, _ uint32, at time.Time) error {
	t.mu.Lock()
	if tok != t.gen || t.efd < 0 {
		t.mu.Unlock()
		return nil // an old registration's last wake-up
	}
	var b [8]byte
	_, err := unix.Read(t.efd, b[:])
	if err != nil {
		t.mu.Unlock()
		return nil // EAGAIN: nothing pending
	}
	n := binary.NativeEndian.Uint64(b[:])
	threshold := t.threshold
	raw, rerr := pread(t.usage, t.buf[:])
	t.mu.Unlock()

	var usage uint64
	if rerr == nil {
		usage, rerr = cgstat.ParseValue(raw, t.dir+"/"+fileUsage)
	}
	if rerr != nil && cgroups.Gone(rerr) {
		return fmt.Errorf("watch %s/%s: %w: %w", t.dir, fileUsage, ErrGone, rerr)
	}
	if rerr != nil {
		t.readErrs.Add(1)
	}
	if !classifyV1(n, usage, rerr == nil, threshold) {
		t.downward.Add(1)
		return nil
	}
	t.deliver(Fire{At: at, Dir: t.dir, Kind: KindUsageThreshold, Threshold: threshold})
	return nil
}

// classifyV1 decides whether a v1 eventfd wake-up is delivered: crossings
// is the eventfd counter (crossings in either direction since the last
// read), usage the re-read usage (usageOK false when unreadable). Only a
// single crossing with usage now known to be below the threshold is
// downward; an unreadable usage is delivered, since a needless wake-up of
// the consumer costs one snapshot and a missed one costs an OOM.
func classifyV1(crossings, usage uint64, usageOK bool, threshold uint64) bool {
	return crossings >= 2 || !usageOK || usage >= threshold
}

// Close implements Tripwire.
func (t *v1) Close() error {
	if !t.shutdown(&t.mu, &t.closed, t.started) {
		return nil
	}
	return t.closeAll()
}

func (t *v1) closeAll() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closeWith(&t.efd, &t.control, &t.usage, &t.dirfd)
}
