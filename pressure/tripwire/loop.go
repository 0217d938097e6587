package tripwire

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// kickToken is the epoll data of the loop's own eventfd; sources use
// tokens >= 0.
const kickToken = -1

// handler handles a wake-up of the source with token tok, seen at at.
// It returns an error only when the source is gone for good; the loop then
// records it and stops.
type handler func(tok int32, events uint32, at time.Time) error

// loop is the reader shared by the mechanisms: an epoll set with the
// mechanism's descriptors and an eventfd that Close uses to stop it, and
// the bounded, coalescing delivery of fires.
type loop struct {
	dir  string
	opts Options
	log  *slog.Logger

	epfd, kick int

	c    chan Fire
	done chan struct{}

	closeOnce sync.Once
	closeErr  error

	lastFire time.Time // reader goroutine only

	fired, dropped, coalesced, downward, ignored, readErrs atomic.Uint64

	errMu sync.Mutex
	err   error
}

func newLoop(dir string, opts Options) (*loop, error) {
	l := &loop{dir: dir, opts: opts, log: opts.Logger, epfd: -1, kick: -1,
		c: make(chan Fire, opts.Buffer), done: make(chan struct{})}
	var err error
	if l.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, fmt.Errorf("new tripwire on %s: epoll_create1: %w", dir, err)
	}
	if l.kick, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		l.closeWith()
		return nil, fmt.Errorf("new tripwire on %s: eventfd: %w", dir, err)
	}
	if err := l.add(l.kick, kickToken, unix.EPOLLIN); err != nil {
		l.closeWith()
		return nil, err
	}
	return l, nil
}

func (l *loop) add(fd int, tok int32, events uint32) error {
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: events, Fd: tok}); err != nil {
		return fmt.Errorf("watch %s: epoll_ctl add: %w", l.dir, err)
	}
	return nil
}

func (l *loop) del(fd int) { _ = unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, fd, nil) }

// run is the reader goroutine. It returns when kicked or when h reports
// the source gone, then closes C and done.
func (l *loop) run(h handler) {
	defer close(l.done)
	defer close(l.c)
	var events [4]unix.EpollEvent
	for {
		n, err := unix.EpollWait(l.epfd, events[:], -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			l.setErr(fmt.Errorf("watch %s: epoll_wait: %w", l.dir, err))
			return
		}
		at := l.opts.Now()
		for _, ev := range events[:n] {
			if ev.Fd == kickToken {
				return
			}
			if err := h(ev.Fd, ev.Events, at); err != nil {
				l.setErr(err)
				if errors.Is(err, ErrGone) {
					l.log.Info("tripwire stopped: cgroup removed", "dir", l.dir, "err", err)
				}
				return
			}
		}
	}
}

// deliver hands f to C unless it comes within Coalesce of the previous
// fire or C is full; either is counted. Reader goroutine only.
func (l *loop) deliver(f Fire) {
	if l.opts.Coalesce > 0 && !l.lastFire.IsZero() && f.At.Sub(l.lastFire) < l.opts.Coalesce {
		l.coalesced.Add(1)
		return
	}
	l.lastFire = f.At
	select {
	case l.c <- f:
		l.fired.Add(1)
	default:
		l.dropped.Add(1)
	}
}

func (l *loop) setErr(err error) {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	if l.err == nil {
		l.err = err
	}
}

// C implements Tripwire.
func (l *loop) C() <-chan Fire { return l.c }

// Dropped implements Tripwire.
func (l *loop) Dropped() uint64 { return l.dropped.Load() }

// Done implements Tripwire.
func (l *loop) Done() <-chan struct{} { return l.done }

// Err implements Tripwire.
func (l *loop) Err() error {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	return l.err
}

// Stats implements Tripwire.
func (l *loop) Stats() Stats {
	return Stats{
		Fired:      l.fired.Load(),
		Dropped:    l.dropped.Load(),
		Coalesced:  l.coalesced.Load(),
		Downward:   l.downward.Load(),
		Ignored:    l.ignored.Load(),
		ReadErrors: l.readErrs.Load(),
	}
}

// shutdown marks a mechanism closed (under its mu, which guards closed
// against Arm) and stops the reader; false when it was closed already.
func (l *loop) shutdown(mu *sync.Mutex, closed *bool, started bool) bool {
	mu.Lock()
	if *closed {
		mu.Unlock()
		return false
	}
	*closed = true
	mu.Unlock()
	l.stop(started)
	return true
}

// stop kicks the reader and waits for it. started says whether run was
// started at all.
func (l *loop) stop(started bool) {
	var one = [8]byte{1} // eventfd counters are host-endian; any non-zero byte wakes
	_, _ = unix.Write(l.kick, one[:])
	if started {
		<-l.done
	}
}

// closeWith closes an implementation's own descriptors, then the loop's,
// setting each to -1, and reports every failure.
func (l *loop) closeWith(own ...*int) error {
	var errs []error
	for _, fd := range append(own, &l.kick, &l.epfd) {
		if *fd >= 0 {
			if err := unix.Close(*fd); err != nil {
				errs = append(errs, fmt.Errorf("close tripwire on %s: %w", l.dir, err))
			}
			*fd = -1
		}
	}
	return errors.Join(errs...)
}
