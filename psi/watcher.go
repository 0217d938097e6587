package psi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Wake reports that a trigger fired.
type Wake struct {
	Index   int       // the trigger's index in the slice given to NewWatcher
	Trigger Trigger   // the trigger as armed (see Effective)
	Time    time.Time // when the watch loop saw it
}

// kickID is the epoll data of the Watcher's eventfd; triggers use their
// index, which is never negative.
const kickID = -1

// maxEvents is how many epoll events one epoll_wait returns at most; more
// ready descriptors are returned by the next call.
const maxEvents = 16

// Watcher holds armed PSI triggers and turns their wake-ups into Wake
// values. Its trigger set is fixed at NewWatcher: to change it, build a new
// Watcher and close the old one.
type Watcher struct {
	trig []Trigger // effective triggers, fixed after NewWatcher

	epfd int // epoll over the trigger fds and evfd
	evfd int // eventfd written to wake Run for ctx cancellation and Close

	fired   []atomic.Uint64
	dropped atomic.Uint64
	polls   atomic.Uint64 // epoll_wait returns, for tests that check Run does not spin
	closing atomic.Bool

	mu      sync.Mutex
	fds     []int   // trigger fds; -1 once removed after EPOLLERR, or closed
	errs    []error // per trigger: why it is no longer watched
	closed  bool
	running chan struct{} // non-nil while Run is active; closed when it returns
}

// writeFunc writes a trigger spec to fd.
type writeFunc func(fd int, spec []byte) error

// NewWatcher opens the pressure file of every trigger, arms the trigger and
// puts it in an epoll set. A refused window is retried with the smallest
// multiple of 2 s that is not shorter (see Effective) and logged once, at
// info level, per Watcher. A missing pressure file gives an error matching
// ErrUnsupported. log may be nil. An empty set of triggers is allowed: Run
// then only waits for ctx or Close. On error nothing is left open.
func NewWatcher(log *slog.Logger, triggers []Trigger) (*Watcher, error) {
	return newWatcher(log, triggers, writeTrigger)
}

func newWatcher(log *slog.Logger, triggers []Trigger, write writeFunc) (_ *Watcher, retErr error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for i, t := range triggers {
		if err := t.Validate(); err != nil {
			return nil, fmt.Errorf("new psi watcher: trigger %d: %w", i, err)
		}
	}
	w := &Watcher{
		trig:  make([]Trigger, len(triggers)),
		fired: make([]atomic.Uint64, len(triggers)),
		epfd:  -1,
		evfd:  -1,
		fds:   make([]int, len(triggers)),
		errs:  make([]error, len(triggers)),
	}
	for i := range w.fds {
		w.fds[i] = -1
	}
	defer func() {
		if retErr != nil {
			w.closeFDs()
		}
	}()
	var err error
	if w.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, fmt.Errorf("new psi watcher: epoll_create1: %w", err)
	}
	if w.evfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return nil, fmt.Errorf("new psi watcher: eventfd: %w", err)
	}
	if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, w.evfd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: kickID}); err != nil {
		return nil, fmt.Errorf("new psi watcher: epoll_ctl add eventfd: %w", err)
	}

	var (
		fallbacks int
		first     fallback
	)
	for i, t := range triggers {
		fd, err := unix.Open(t.Path, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("new psi watcher: %w", openErr(t.Path, err))
		}
		w.fds[i], w.trig[i] = fd, t
		eff, fb, err := arm(fd, t, write)
		if errors.Is(err, unix.EOPNOTSUPP) { // PSI compiled in, disabled at boot
			return nil, fmt.Errorf("new psi watcher: %w: %w", ErrUnsupported, err)
		}
		if err != nil {
			return nil, fmt.Errorf("new psi watcher: %w", err)
		}
		if fb.refusal != nil {
			if fallbacks == 0 {
				first = fb
			}
			fallbacks++
		}
		w.trig[i] = eff
		// EPOLLERR and EPOLLHUP are always reported; PSI signals a
		// fired trigger with EPOLLPRI, and a removed cgroup with
		// EPOLLERR|EPOLLPRI.
		if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLPRI, Fd: int32(i)}); err != nil {
			return nil, fmt.Errorf("new psi watcher: epoll_ctl add %s: %w", t.Path, err)
		}
	}
	if fallbacks > 0 {
		log.Info("psi trigger window refused, using the next multiple of 2s (no CAP_SYS_RESOURCE?)",
			"path", first.asked.Path,
			"asked_window", first.asked.Window, "asked_stall", first.asked.Stall,
			"used_window", first.used.Window, "used_stall", first.used.Stall,
			"fallbacks", fallbacks, "triggers", len(triggers),
			"err", first.refusal)
	}
	return w, nil
}

// fallback records a trigger whose window was refused.
type fallback struct {
	asked, used Trigger
	refusal     error // nil: no fallback
}

// arm writes t to fd and, if the kernel refuses t's window, the
// unprivileged variant of t. It returns the trigger as armed.
func arm(fd int, t Trigger, write writeFunc) (Trigger, fallback, error) {
	var buf [64]byte
	spec := appendSpec(buf[:0], t)
	err := write(fd, spec)
	if err == nil {
		return t, fallback{}, nil
	}
	slow, ok := unprivileged(t)
	if !ok || !refused(err) {
		return Trigger{}, fallback{}, fmt.Errorf("arm psi trigger %q on %s: %w", spec[:len(spec)-1], t.Path, err)
	}
	slowSpec := appendSpec(buf[len(spec):len(spec)], slow)
	if err2 := write(fd, slowSpec); err2 != nil {
		return Trigger{}, fallback{}, fmt.Errorf("arm psi trigger on %s: %q: %w; fallback %q: %w",
			t.Path, spec[:len(spec)-1], err, slowSpec[:len(slowSpec)-1], err2)
	}
	return slow, fallback{asked: t, used: slow, refusal: err}, nil
}

// writeTrigger writes spec, NUL included, in one write. A failed write
// leaves no trigger behind, so the same fd can be written again.
func writeTrigger(fd int, spec []byte) error {
	for {
		_, err := unix.Write(fd, spec)
		if err == unix.EINTR {
			continue
		}
		return err
	}
}

// Effective returns the triggers as armed, in NewWatcher's order: equal to
// the requested ones, or with the window and stall of the fallback.
func (w *Watcher) Effective() []Trigger {
	out := make([]Trigger, len(w.trig))
	copy(out, w.trig)
	return out
}

// Fired returns how many times trigger i fired, delivered or not.
func (w *Watcher) Fired(i int) uint64 {
	if i < 0 || i >= len(w.fired) {
		return 0
	}
	return w.fired[i].Load()
}

// Dropped returns how many wake-ups were dropped because the consumer's
// channel was full.
func (w *Watcher) Dropped() uint64 { return w.dropped.Load() }

// Errs returns, per trigger, nil while it is watched, or why it no longer
// is: an error matching ErrGone once its cgroup was removed.
func (w *Watcher) Errs() []error {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]error, len(w.errs))
	copy(out, w.errs)
	return out
}

// Run waits for triggers to fire and sends a Wake for each to wake without
// ever blocking: when wake is full (or nil) the wake-up is dropped and
// counted. A trigger whose cgroup is removed is taken out of the epoll set
// and reported by Errs. Run returns ctx.Err() when ctx is done, ErrClosed
// when the Watcher is closed, or the error of epoll_wait. Only one Run may
// be active at a time; it may be called again after it returned.
func (w *Watcher) Run(ctx context.Context, wake chan<- Wake) error {
	w.mu.Lock()
	switch {
	case w.closed:
		w.mu.Unlock()
		return fmt.Errorf("run psi watcher: %w", ErrClosed)
	case w.running != nil:
		w.mu.Unlock()
		return errors.New("run psi watcher: already running")
	}
	done := make(chan struct{})
	w.running = done
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.running = nil
		w.mu.Unlock()
		close(done)
	}()

	// Cancellation wakes epoll_wait through the eventfd. The goroutine is
	// waited for before Run returns, so it never writes to an eventfd
	// that Close has closed.
	exit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-ctx.Done():
			w.kick()
		case <-exit:
		}
	})
	defer func() {
		close(exit)
		wg.Wait()
	}()

	var events [maxEvents]unix.EpollEvent
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if w.closing.Load() {
			return fmt.Errorf("run psi watcher: %w", ErrClosed)
		}
		n, err := unix.EpollWait(w.epfd, events[:], -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("run psi watcher: epoll_wait: %w", err)
		}
		w.polls.Add(1)
		now := time.Now()
		for _, ev := range events[:n] {
			switch i := int(ev.Fd); {
			case i == kickID:
				w.drainKick()
			case ev.Events&(unix.EPOLLERR|unix.EPOLLHUP) != 0:
				w.remove(i)
			case ev.Events&unix.EPOLLPRI != 0:
				w.deliver(wake, i, now)
			}
		}
	}
}

// deliver counts a wake-up of trigger i and hands it to wake if there is
// room.
func (w *Watcher) deliver(wake chan<- Wake, i int, now time.Time) {
	w.fired[i].Add(1)
	select {
	case wake <- Wake{Index: i, Trigger: w.trig[i], Time: now}:
	default:
		w.dropped.Add(1)
	}
}

// remove stops watching trigger i after EPOLLERR: its cgroup was removed
// and the kernel destroyed the trigger. Its fd is closed here so that a
// level-triggered EPOLLERR cannot make Run spin.
func (w *Watcher) remove(i int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fd := w.fds[i]
	if fd < 0 {
		return
	}
	_ = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, fd, nil)
	_ = unix.Close(fd)
	w.fds[i] = -1
	w.errs[i] = fmt.Errorf("watch psi trigger %v: %w", w.trig[i], ErrGone)
}

// kick wakes Run's epoll_wait.
func (w *Watcher) kick() {
	var one = [8]byte{1} // eventfd counters are host-endian uint64; any non-zero value wakes
	_, _ = unix.Write(w.evfd, one[:])
}

// drainKick resets the eventfd so that a later Run is not woken by an old
// kick.
func (w *Watcher) drainKick() {
	var b [8]byte
	_, _ = unix.Read(w.evfd, b[:])
}

// Close stops an active Run (it returns ErrClosed), waits for it to return,
// and closes every descriptor, which destroys the kernel triggers. It is
// safe to call more than once and from any goroutine except the one
// running Run.
func (w *Watcher) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	running := w.running
	w.mu.Unlock()
	if running != nil {
		w.closing.Store(true)
		w.kick()
		<-running
	}
	return w.closeFDs()
}

// closeFDs closes every descriptor the Watcher holds.
func (w *Watcher) closeFDs() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var errs []error
	for i, fd := range w.fds {
		if fd >= 0 {
			if err := unix.Close(fd); err != nil {
				errs = append(errs, fmt.Errorf("close %s: %w", w.trig[i].Path, err))
			}
			w.fds[i] = -1
		}
	}
	for _, fd := range []*int{&w.evfd, &w.epfd} {
		if *fd >= 0 {
			if err := unix.Close(*fd); err != nil {
				errs = append(errs, fmt.Errorf("close psi watcher: %w", err))
			}
			*fd = -1
		}
	}
	return errors.Join(errs...)
}
