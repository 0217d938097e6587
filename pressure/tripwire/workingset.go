package tripwire

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups"

	"github.com/nodeguard/nodeguard/cgroups/cgstat"
)

// Files of the working-set mechanism.
const fileStat = "memory.stat"

// wsPoller is the cgroup v2 Tripwire of KindWorkingSet: a one-shot timerfd
// re-armed after every tick with a period that shrinks with the distance
// to the line, memory.current read on every tick and memory.stat only
// when usage is at or above the line (the working set, usage minus
// inactive_file, is never above usage), and an upward-crossing detector
// with hysteresis and a floor between deliveries. It writes nothing.
type wsPoller struct {
	*loop
	started bool

	mu        sync.Mutex // guards everything below
	dirfd     int
	current   int
	stat      int
	tfd       int
	threshold uint64
	above     bool      // delivered for this crossing; cleared below threshold-Hysteresis
	lastFire  time.Time // last delivery (or drop), for the floor
	// smu guards the last memory.stat reading, which the refresher
	// goroutine writes without holding mu (the read can take long).
	smu      sync.Mutex
	inactive uint64    // inactive_file at the last memory.stat read
	statOK   bool      // inactive is known
	statAt   time.Time // when it was read
	statBG   int       // the refresher's own memory.stat
	bgStop   chan struct{}
	bgDone   chan struct{}
	nearC    chan struct{} // wakes the refresher when usage comes near
	bgBuf    [8192]byte
	usage    uint64    // memory.current at the last read
	readAt   time.Time // when the last tick read
	// The memory.high assist (unless Options.NoAssist): memory.high kept
	// at the usage where the working set reaches the line, so that the
	// charge that gets there raises a kernel event (inotify on
	// memory.events.local) instead of waiting for the next tick.
	assist bool
	hk     highKeeper
	ifd    int    // inotify on the events file
	events string // fileEventsLocal, or fileEvents on old kernels
	high   uint64 // memory.high as last written; 0 before
	// highChecked: when memory.high was last read back; resets counts
	// how often someone else put it elsewhere (systemd does, on a
	// daemon-reload, for a slice it manages).
	highChecked time.Time
	resets      atomic.Uint64
	ibuf        [4096]byte
	closed      bool
	buf         [64]byte
	sbuf        [8192]byte
}

func newWorkingSet(dir string, opts Options) (_ *wsPoller, retErr error) {
	l, err := newLoop(dir, opts)
	if err != nil {
		return nil, err
	}
	t := &wsPoller{loop: l, dirfd: -1, current: -1, stat: -1, statBG: -1, tfd: -1, ifd: -1, assist: !opts.NoAssist, hk: highKeeper{dirfd: -1},
		bgStop: make(chan struct{}), bgDone: make(chan struct{}), nearC: make(chan struct{}, 1)}
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
		return nil, fmt.Errorf("new working-set tripwire: %w", err)
	}
	if t.current, err = openAt(t.dirfd, dir, fileCurrent, unix.O_RDONLY); err != nil {
		return nil, fmt.Errorf("new working-set tripwire: %w", err)
	}
	if t.stat, err = openAt(t.dirfd, dir, fileStat, unix.O_RDONLY); err != nil {
		return nil, fmt.Errorf("new working-set tripwire: %w", err)
	}
	if t.statBG, err = openAt(t.dirfd, dir, fileStat, unix.O_RDONLY); err != nil {
		return nil, fmt.Errorf("new working-set tripwire: %w", err)
	}
	if t.assist || opts.Store != nil {
		// memory.high is ours to write: keep the original to restore.
		// Without the assist too, with a store: what a Tripwire that
		// did not close left armed goes back now.
		t.hk = newHighKeeper(dir, t.dirfd, opts)
		if err := t.hk.load(); err != nil {
			return nil, fmt.Errorf("new working-set tripwire: %w", err)
		}
	}
	if t.assist {
		if why := t.assistDenied(); why != "" {
			t.assist = false
			t.opts = t.opts.withoutAssist()
			t.log.Warn("tripwire: no memory.high assist on the pod root: "+why+"; the working-set poll alone wakes the manager",
				"dir", dir, "min_period", t.opts.MinPeriod)
		}
	}
	if t.assist {
		if err := t.watchEvents(); err != nil {
			return nil, fmt.Errorf("new working-set tripwire: %w", err)
		}
	}
	if t.tfd, err = unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC|unix.TFD_NONBLOCK); err != nil {
		return nil, fmt.Errorf("new working-set tripwire on %s: timerfd_create: %w", dir, err)
	}
	if err := t.add(t.tfd, tokTimer, unix.EPOLLIN); err != nil {
		return nil, fmt.Errorf("new working-set tripwire: %w", err)
	}
	t.started = true
	go t.run(t.handle)
	go t.refresh()
	return t, nil
}

// refresh is the refresher goroutine: every statEvery, while usage is
// below the line but within MaxRate x MaxPeriod of it, it reads
// memory.stat, so that the tick that sees usage cross knows the cgroup's
// page cache without reading it then (under a fast charger that read
// costs a flush of every statistic it changed: milliseconds, and tens of
// them under emulation), and the assist knows where to put memory.high.
// It never holds mu while reading.
func (t *wsPoller) refresh() {
	defer close(t.bgDone)
	tick := time.NewTicker(statEvery)
	defer tick.Stop()
	for {
		select {
		case <-t.bgStop:
			return
		case <-tick.C:
		}
		t.mu.Lock()
		usage, threshold := t.usage, t.threshold
		t.mu.Unlock()
		if threshold == 0 || !t.near(usage, threshold) {
			// Far (or not armed): sleep until the reader sees usage
			// come near, with no ticks meanwhile.
			select {
			case <-t.bgStop:
				return
			case <-t.nearC:
			}
			continue
		}
		if usage >= threshold {
			continue // at or above: the ticks read it themselves
		}
		raw, err := pread(t.statBG, t.bgBuf[:])
		if err != nil {
			continue // the reader's own reads report errors
		}
		inactive, err := cgstat.ParseCounter(raw, "inactive_file", t.dir+"/"+fileStat)
		if err != nil {
			continue
		}
		t.smu.Lock()
		t.inactive, t.statOK, t.statAt = inactive, true, t.opts.Now()
		t.smu.Unlock()
	}
}

// near tells whether usage is within MaxRate x MaxPeriod of the line (or
// past it).
func (t *wsPoller) near(usage, threshold uint64) bool {
	return usage+t.opts.MaxRate/uint64(time.Second/t.opts.MaxPeriod) >= threshold
}

// lastStat returns the last memory.stat reading.
func (t *wsPoller) lastStat() (inactive uint64, ok bool, at time.Time) {
	t.smu.Lock()
	defer t.smu.Unlock()
	return t.inactive, t.statOK, t.statAt
}

// Arm sets the line and schedules a tick at once. A working set already
// above a new line fires on that tick (once: the floor and the crossing
// state hold after it).
func (t *wsPoller) Arm(threshold uint64) error {
	if err := checkThreshold(threshold, t.dir+"/"+fileCurrent); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("arm tripwire on %s: %w", t.dir, ErrClosed)
	}
	if threshold == t.threshold {
		return nil
	}
	t.threshold, t.above = threshold, false
	return t.schedule(t.opts.MinPeriod)
}

// schedule sets the one-shot timer. Callers hold mu.
func (t *wsPoller) schedule(d time.Duration) error {
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if err := unix.TimerfdSettime(t.tfd, 0, &spec, nil); err != nil {
		return fmt.Errorf("watch %s: timerfd_settime %v: %w", t.dir, d, err)
	}
	return nil
}

// wsStep is the pure decision of one tick: the working set (or the usage
// bound) against the line, the crossing state, and the floor.
type wsStep struct {
	deliver  bool          // hand a Fire to C
	wait     bool          // an upward crossing within the floor: retry
	downward bool          // crossed back below threshold-Hysteresis
	above    bool          // the crossing state after this tick
	next     time.Duration // until the next tick
}

// decideWS decides a tick: ws is the working set (or the usage when that
// is below the line), sinceFire the time since the last delivery (negative
// when there was none).
func decideWS(o Options, threshold, ws uint64, above bool, sinceFire time.Duration) wsStep {
	s := wsStep{above: above}
	var dist uint64
	switch {
	case ws >= threshold:
		dist = ws - threshold
		if !above {
			if sinceFire >= 0 && sinceFire < o.Floor {
				s.wait = true
			} else {
				s.deliver, s.above = true, true
			}
		}
	default:
		dist = threshold - ws
		if above && dist > o.Hysteresis {
			s.downward, s.above = true, false
		}
	}
	s.next = periodFor(o, dist)
	switch {
	case s.wait:
		s.next = min(s.next, o.Floor-sinceFire)
	case s.above:
		// The consumer has this crossing; only its end matters, and
		// the next crossing starts from below, ticked at the floor.
		s.next = max(s.next, o.Floor)
	}
	s.next = max(s.next, o.MinPeriod)
	return s
}

// periodFor is the tick period at dist bytes from the line: the time a
// ramp at MaxRate needs to cover it, within [MinPeriod, MaxPeriod].
func periodFor(o Options, dist uint64) time.Duration {
	ns := float64(dist) / float64(o.MaxRate) * 1e9
	if ns >= float64(o.MaxPeriod) {
		return o.MaxPeriod
	}
	return max(time.Duration(ns), o.MinPeriod)
}

// tokEvents is the working-set poll's inotify token (tokTimer is 0).
const tokEvents = 1

// eventEvery is the least spacing of the reads that kernel events cause:
// memory.events.local also changes for "max" on every charge batch of a
// cgroup at its limit (up to 100 notifications a second), and an event
// within it of the last read only brings the next tick forward. An event
// is read as a tick: memory.stat only when the inactive_file read less
// than statEvery ago does not already put the working set at the line
// (reading memory.stat under a fast charger costs the kernel a flush of
// every statistic it changed).
const eventEvery = 2 * time.Millisecond

// watchEvents sets up inotify on memory.events.local (memory.events on
// kernels without it). Callers own t alone.
func (t *wsPoller) watchEvents() error {
	t.events = fileEventsLocal
	if err := unix.Faccessat(t.dirfd, fileEventsLocal, unix.F_OK, 0); err != nil {
		t.events = fileEvents
	}
	var err error
	if t.ifd, err = unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK); err != nil {
		return fmt.Errorf("inotify_init1: %w", err)
	}
	name := t.dir + "/" + t.events
	if _, err := unix.InotifyAddWatch(t.ifd, name, unix.IN_MODIFY); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("%w: %w", ErrUnsupported, err)
		}
		return fmt.Errorf("inotify_add_watch %s: %w", name, err)
	}
	return t.add(t.ifd, tokEvents, unix.EPOLLIN)
}

func (t *wsPoller) handle(tok int32, _ uint32, at time.Time) error {
	exact := false
	if tok == tokEvents {
		if drainInotify(t.ifd, t.ibuf[:]) {
			return fmt.Errorf("watch %s/%s: %w", t.dir, t.events, ErrGone)
		}
		exact = true
	} else {
		var b [8]byte
		if _, err := unix.Read(t.tfd, b[:]); err != nil {
			return nil // EAGAIN: re-armed by Arm since
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.threshold == 0 || t.closed {
		return nil
	}
	if since := at.Sub(t.readAt); exact && since < eventEvery {
		return t.schedule(eventEvery - since)
	}
	t.readAt = at
	threshold := t.threshold
	ws, err := t.read(threshold, at)
	// A poll's crossing is seen when the files are read, not when the
	// timer woke the reader: a reader delayed in between must not date
	// its fire before the usage it read.
	at = t.opts.Now()
	switch {
	case err != nil && cgroups.Gone(err):
		return fmt.Errorf("watch %s: %w: %w", t.dir, ErrGone, err)
	case err != nil:
		t.readErrs.Add(1)
		return t.schedule(t.opts.MinPeriod)
	}
	since := time.Duration(-1)
	if !t.lastFire.IsZero() {
		since = at.Sub(t.lastFire)
	}
	s := decideWS(t.opts, threshold, ws, t.above, since)
	t.above = s.above
	switch {
	case s.deliver:
		t.lastFire = at
		select {
		case t.c <- Fire{At: at, Dir: t.dir, Kind: KindWorkingSet, Threshold: threshold, WorkingSet: ws}:
			t.fired.Add(1)
		default:
			t.dropped.Add(1)
		}
	case s.wait:
		t.coalesced.Add(1)
	case s.downward:
		t.downward.Add(1)
	default:
		t.ignored.Add(1)
	}
	if t.assist {
		t.moveHigh(threshold)
	}
	return t.schedule(s.next)
}

// highMargin is the least distance of the assist's memory.high above
// usage: one charge batch, 64 pages, on a CPU.
const highMargin = 256 << 10

// moveHigh keeps memory.high where usage will be when the working set
// reaches the line, threshold + inactive_file, and never within
// highMargin above usage or below it: page cache above the line is above the line,
// not above memory.high, and is neither reclaimed nor throttled by it. It
// moves down at once and up only by more than Hysteresis. While the working set is above the
// line memory.high stays where the crossing put it, so the allocators are
// slowed while the consumer acts. A failed write is counted and retried
// on the next tick. Callers hold mu.
func (t *wsPoller) moveHigh(threshold uint64) {
	t.checkHigh()
	if t.above && t.high != 0 {
		return
	}
	want := threshold
	if inactive, ok, _ := t.lastStat(); ok {
		want += inactive
	}
	// One charge batch (64 pages a CPU) above usage at least: never a
	// memory.high the writer would have to reclaim down to.
	want = max(want, t.usage+highMargin)
	// Down at once (a memory.high above where the working set meets
	// the line delays the event), up only by more than Hysteresis (one
	// too low costs an early event, read and answered by moving it).
	if t.high != 0 && want+highMargin > t.high && want < t.high+t.opts.Hysteresis {
		return
	}
	if _, err := t.hk.write(strconv.FormatUint(want, 10)); err != nil {
		t.readErrs.Add(1)
		return
	}
	t.high = want
}

// highCheckEvery is how often the assist reads memory.high back: systemd
// re-applies a slice's own MemoryHigh= (infinity) on every daemon-reload,
// which every package that installs a unit runs, and would leave the pod
// root without its event until the next move; the node lane measured
// that. Three system calls every half second.
const highCheckEvery = 500 * time.Millisecond

// checkHigh forgets the memory.high the assist wrote once the file holds
// something else, so that moveHigh writes it again on this tick. Callers
// hold mu.
func (t *wsPoller) checkHigh() {
	now := t.opts.Now()
	if t.high == 0 || now.Sub(t.highChecked) < highCheckEvery {
		return
	}
	t.highChecked = now
	cur, err := t.hk.read()
	if err != nil || cur == t.hk.written {
		return
	}
	if t.resets.Add(1) == 1 {
		t.log.Info("memory.high of the pod root was changed by someone else (systemd re-applies a slice's MemoryHigh= on daemon-reload); the tripwire sets it again",
			"dir", t.dir, "ours", t.hk.written, "found", cur)
	}
	t.high = 0
}

// statEvery is how often the refresher reads inactive_file while usage
// is below the line but within MaxRate x MaxPeriod of it: at most 10
// memory.stat reads a second, only near the line.
const statEvery = 100 * time.Millisecond

// read returns the working set, or the usage when that is below the
// threshold (the working set is then below it too). memory.stat is read
// on every tick at or above the line, except on the fast path of a new
// crossing: when usage minus the refresher's inactive_file (at most two
// statEvery old) is at the line, that is the working set; the tick after
// a fire reads memory.stat itself, so page cache that grew within that
// time costs at most one early fire. Callers hold mu.
func (t *wsPoller) read(threshold uint64, at time.Time) (uint64, error) {
	raw, err := pread(t.current, t.buf[:])
	if err != nil {
		return 0, fmt.Errorf("read %s/%s: %w", t.dir, fileCurrent, err)
	}
	usage, err := cgstat.ParseValue(raw, t.dir+"/"+fileCurrent)
	if err != nil {
		return 0, err
	}
	t.usage = usage
	if t.near(usage, threshold) {
		select {
		case t.nearC <- struct{}{}:
		default:
		}
	}
	if usage < threshold {
		return usage, nil
	}
	if in, ok, when := t.lastStat(); !t.above && ok && at.Sub(when) < 2*statEvery && usage-min(usage, in) >= threshold {
		return usage - min(usage, in), nil
	}
	raw, err = pread(t.stat, t.sbuf[:])
	if err != nil {
		return 0, fmt.Errorf("read %s/%s: %w", t.dir, fileStat, err)
	}
	inactive, err := cgstat.ParseCounter(raw, "inactive_file", t.dir+"/"+fileStat)
	if err != nil {
		return 0, err
	}
	t.smu.Lock()
	t.inactive, t.statOK, t.statAt = inactive, true, t.opts.Now()
	t.smu.Unlock()
	return usage - min(usage, inactive), nil
}

// Close implements Tripwire; it restores memory.high where the assist (or
// a Tripwire that did not close) left it.
func (t *wsPoller) Close() error {
	if !t.shutdown(&t.mu, &t.closed, t.started) {
		return nil
	}
	close(t.bgStop)
	<-t.bgDone
	t.mu.Lock()
	rerr := t.hk.restore() // nothing to do when memory.high was never written
	t.mu.Unlock()
	return errors.Join(rerr, t.closeAll())
}

func (t *wsPoller) closeAll() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closeWith(&t.ifd, &t.tfd, &t.statBG, &t.stat, &t.current, &t.dirfd)
}

// assistDenied says why the assist must not write memory.high on the
// directory ("" when it may): the process it must never throttle runs
// beneath it (memory.high throttles the whole subtree: guard mode's own
// pod beneath kubepods), or that cannot be told, or the record of the
// original cannot be read (a write could not be undone after a crash).
// Callers own t alone.
func (t *wsPoller) assistDenied() string {
	if t.hk.refuse != nil {
		return t.hk.refuse.Error()
	}
	where, in, err := processBeneath(t.dirfd, t.dir, t.opts.SelfPID)
	switch {
	case err != nil:
		return fmt.Sprintf("whether pid %d runs beneath it cannot be told: %v", t.opts.SelfPID, err)
	case in:
		return fmt.Sprintf("pid %d (this agent) runs beneath it, in %s, and memory.high would throttle it with the pods", t.opts.SelfPID, where)
	}
	return ""
}
