package tripwire

import (
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups"

	"github.com/nodeguard/nodeguard/cgroups/cgstat"
)

// tokTimer is the poll loop's timerfd token.
const tokTimer = 0

// poller is the Tripwire of Options.LeaveHigh on v2 (and, for tests, of
// any file holding one byte count): a timerfd in the loop's epoll set, and
// an upward-crossing detector over the usage it re-reads on each tick.
type poller struct {
	*loop
	started bool
	file    string

	mu        sync.Mutex // guards everything below
	dirfd     int
	usage     int
	tfd       int
	threshold uint64
	above     bool
	closed    bool
	buf       [64]byte
}

func newPoll(dir string, opts Options) (*poller, error) {
	return newPoller(dir, fileCurrent, opts)
}

func newPoller(dir, file string, opts Options) (_ *poller, retErr error) {
	l, err := newLoop(dir, opts)
	if err != nil {
		return nil, err
	}
	t := &poller{loop: l, file: file, dirfd: -1, usage: -1, tfd: -1}
	defer func() {
		if retErr != nil {
			t.closeAll()
		}
	}()
	if t.dirfd, err = openDir(dir); err != nil {
		return nil, fmt.Errorf("new polling tripwire: %w", err)
	}
	if t.usage, err = openAt(t.dirfd, dir, file, unix.O_RDONLY); err != nil {
		return nil, fmt.Errorf("new polling tripwire: %w", err)
	}
	if t.tfd, err = unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC|unix.TFD_NONBLOCK); err != nil {
		return nil, fmt.Errorf("new polling tripwire on %s: timerfd_create: %w", dir, err)
	}
	if err := t.add(t.tfd, tokTimer, unix.EPOLLIN); err != nil {
		return nil, fmt.Errorf("new polling tripwire: %w", err)
	}
	t.started = true
	go t.run(t.handle)
	return t, nil
}

// Arm sets the threshold and starts the timer on the first call. The
// crossing state is reset from the current usage, so a usage already
// above a new threshold fires on the next tick.
func (t *poller) Arm(threshold uint64) error {
	if err := checkThreshold(threshold, t.dir+"/"+t.file); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("arm tripwire on %s: %w", t.dir, ErrClosed)
	}
	if t.threshold == 0 {
		every := unix.NsecToTimespec(int64(t.opts.PollEvery))
		spec := unix.ItimerSpec{Interval: every, Value: every}
		if err := unix.TimerfdSettime(t.tfd, 0, &spec, nil); err != nil {
			return fmt.Errorf("arm tripwire on %s: timerfd_settime %v: %w", t.dir, t.opts.PollEvery, err)
		}
	}
	t.threshold, t.above = threshold, false
	return nil
}

func (t *poller) handle(_ int32, _ uint32, at time.Time) error {
	var b [8]byte
	if _, err := unix.Read(t.tfd, b[:]); err != nil {
		return nil // EAGAIN
	}
	t.mu.Lock()
	threshold := t.threshold
	raw, err := pread(t.usage, t.buf[:])
	var usage uint64
	if err == nil {
		usage, err = cgstat.ParseValue(raw, t.dir+"/"+t.file)
	}
	was := t.above
	if err == nil {
		t.above = usage >= threshold
	}
	t.mu.Unlock()
	switch {
	case err != nil && cgroups.Gone(err):
		return fmt.Errorf("watch %s/%s: %w: %w", t.dir, t.file, ErrGone, err)
	case err != nil:
		t.readErrs.Add(1) // a poll has no kernel signal to deliver
		return nil
	case usage >= threshold && !was:
		t.deliver(Fire{At: at, Dir: t.dir, Kind: KindPoll, Threshold: threshold})
	case usage < threshold && was:
		t.downward.Add(1)
	default:
		t.ignored.Add(1)
	}
	return nil
}

// Close implements Tripwire.
func (t *poller) Close() error {
	if !t.shutdown(&t.mu, &t.closed, t.started) {
		return nil
	}
	return t.closeAll()
}

func (t *poller) closeAll() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closeWith(&t.tfd, &t.usage, &t.dirfd)
}
