package tripwire

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/internal/statestore"
)

// Kinds of Fire.
const (
	// KindUsageThreshold is a cgroup v1 memory.usage_in_bytes threshold
	// event.
	KindUsageThreshold = "usage_threshold"
	// KindMemoryHigh is a cgroup v2 memory.high event.
	KindMemoryHigh = "memory.high"
	// KindPoll is an upward crossing seen by polling memory.current (v2
	// with Options.LeaveHigh).
	KindPoll = "poll"
	// KindWorkingSet is an upward crossing of the working set (usage
	// minus inactive_file) seen by the adaptive poll, the v2 default.
	KindWorkingSet = "working_set"
)

var (
	// ErrUnsupported reports a directory that lacks the files of the
	// asked mechanism: not a memory cgroup, or one of the other version.
	ErrUnsupported = errors.New("not a memory cgroup of this version")
	// ErrInvalidThreshold reports a threshold Arm cannot set (zero).
	ErrInvalidThreshold = errors.New("invalid threshold")
	// ErrMalformed reports a cgroup file whose content does not parse. It
	// is the cgroups package's ErrMalformed: the files are parsed by
	// cgroups/cgstat, whose *ParseError names the file and the line.
	ErrMalformed = cgroups.ErrMalformed
	// ErrClosed reports use of a closed Tripwire.
	ErrClosed = errors.New("tripwire closed")
	// ErrGone reports that the watched cgroup was removed.
	ErrGone = errors.New("cgroup removed")
)

// Fire is one crossing: when the kernel told us, and what.
type Fire struct {
	// At is when the reader saw the kernel's signal (right after its
	// wake-up, before any file was re-read); for KindWorkingSet, when it
	// had read the usage that crossed.
	At time.Time
	// Dir is the watched directory.
	Dir string
	// Kind is KindUsageThreshold (v1), KindWorkingSet, KindMemoryHigh
	// or KindPoll (v2).
	Kind string
	// Count is, for KindMemoryHigh, the "high" counter of
	// memory.events.local (memory.events on old kernels) that confirmed
	// the fire; 0 for the other kinds.
	Count uint64
	// Threshold is the threshold armed when the signal was handled.
	Threshold uint64
	// WorkingSet is, for KindWorkingSet, the working set that crossed;
	// 0 for the other kinds.
	WorkingSet uint64
}

// Stats counts what a Tripwire's reader did. Every kernel signal ends in
// exactly one of Fired, Dropped, Coalesced, Downward or Ignored.
type Stats struct {
	// Fired counts fires delivered to C.
	Fired uint64
	// Dropped counts fires lost because C was full.
	Dropped uint64
	// Coalesced counts upward signals within Options.Coalesce of the
	// previous fire, not delivered (KindWorkingSet: ticks that saw a
	// crossing within Options.Floor of the previous fire; it is
	// delivered when the floor has passed, if still above).
	Coalesced uint64
	// Downward counts v1 and poll crossings from above to below the
	// threshold, not delivered.
	Downward uint64
	// Ignored counts wake-ups that were no crossing: v2 memory.events
	// changes other than "high" (max, oom, ...) or before the first Arm,
	// and poll ticks without an upward crossing.
	Ignored uint64
	// ReadErrors counts re-reads that failed (the signal was still
	// delivered).
	ReadErrors uint64
}

// Tripwire watches one cgroup directory (the memory hierarchy's directory
// of the pod root) for its memory usage reaching a threshold.
type Tripwire interface {
	// Arm sets or moves the threshold in bytes (usage >= threshold
	// fires). Re-arming with a new value is cheap and safe while
	// running. Zero is ErrInvalidThreshold.
	Arm(threshold uint64) error
	// C delivers fires. It is never blocked on: a fire that does not
	// fit is dropped and counted (Dropped). It is closed after Close.
	C() <-chan Fire
	// Dropped returns how many fires did not fit in C.
	Dropped() uint64
	// Stats returns the reader's counters.
	Stats() Stats
	// Err returns why the reader stopped before Close (an error
	// matching ErrGone when the cgroup was removed), or nil.
	Err() error
	// Done is closed when the reader goroutine has returned.
	Done() <-chan struct{}
	// Close stops the reader, waits for it, closes every descriptor,
	// and on v2 restores memory.high. It is idempotent.
	Close() error
}

// Defaults of Options.
const (
	// DefaultBuffer is C's capacity: fires are at most one per
	// DefaultCoalesce, and the consumer only needs the latest to act.
	DefaultBuffer = 16
	// DefaultCoalesce is the minimum spacing of fires: far below the
	// ~50 ms a fast hog takes from first reclaim to a memcg OOM, and above
	// the kernel's own wake-up cost, so a storm of v2 "high" increments
	// (one per charge batch while above high) costs one fire per ms.
	DefaultCoalesce = time.Millisecond
	// DefaultPollEvery is the poll interval with LeaveHigh: one pread of
	// memory.current every 5 ms costs a few µs of CPU per 5 ms and
	// keeps the latency well under the ~50 ms to an OOM.
	DefaultPollEvery = 5 * time.Millisecond

	// DefaultMaxRate is the fastest ramp the working-set poll plans for,
	// twice the 1 GiB/s the eviction path must survive: a tick comes
	// before a ramp at or below it can cover the distance to the line,
	// so the ticks close in on a crossing and the last one lands within
	// MinPeriod of it.
	DefaultMaxRate = 2 << 30
	// DefaultMinPeriod is the shortest tick of the poll without the
	// assist (NoAssist), within 2 MiB of the line (DefaultMaxRate x 1
	// ms): a crossing is seen within ~1 ms plus the reader's wake-up, far
	// inside the 10 ms detection target, at one pread (plus memory.stat
	// above usage) per ms only while that close.
	DefaultMinPeriod = time.Millisecond
	// DefaultAssistMinPeriod is the shortest tick with the memory.high
	// assist: the kernel's event at the charge sees an anonymous ramp
	// reach the line, and the poll is the net for what it cannot see (page
	// cache turning into anonymous memory at a limit, with usage flat), so
	// it need not tick 1000 times a second near the line; 5 ms keeps that
	// net inside the 10 ms detection target.
	DefaultAssistMinPeriod = 5 * time.Millisecond
	// DefaultMaxPeriod is the longest tick, from 200 MiB away: 10 reads
	// of memory.current a second on an idle node.
	DefaultMaxPeriod = 100 * time.Millisecond
	// DefaultFloor is the least spacing of working-set fires: at most 50
	// a second even for a working set that keeps crossing the line, and
	// shorter than any useful reaction of the consumer (one snapshot
	// and decision take ~1 ms, an eviction's release tens of ms).
	DefaultFloor = 20 * time.Millisecond
	// DefaultHysteresis is how far below the line the working set must
	// come back before the next crossing fires: more than memory.current's
	// per-CPU charge caching (64 pages a CPU) and a freed mapping's
	// jitter, so a line the consumer has judged does not fire again
	// while the working set hovers at it.
	DefaultHysteresis = 2 << 20
)

// Options configures New. The zero value is the design default.
type Options struct {
	// Mechanism picks the v2 mechanism: KindWorkingSet (the default,
	// "" too), KindMemoryHigh or KindPoll (also chosen by LeaveHigh).
	// Ignored on v1, which has only KindUsageThreshold.
	Mechanism string
	// MaxRate, MinPeriod and MaxPeriod shape the working-set poll's
	// tick: distance to the line / MaxRate (bytes per second), within
	// [MinPeriod, MaxPeriod]. 0 means DefaultMaxRate, DefaultMinPeriod
	// (DefaultAssistMinPeriod with the assist), DefaultMaxPeriod.
	MaxRate              uint64
	MinPeriod, MaxPeriod time.Duration
	// NoAssist (KindWorkingSet) never writes memory.high: the poll
	// alone, without the kernel event at the charge that reaches the
	// line (see the package documentation).
	NoAssist bool
	// Floor is the least spacing of working-set fires (0 means
	// DefaultFloor); Hysteresis how far below the line the working set
	// must return before it fires again (0 means DefaultHysteresis).
	Floor      time.Duration
	Hysteresis uint64
	// LeaveHigh (v2 only) never writes memory.high: the Tripwire polls
	// memory.current every PollEvery instead (Kind KindPoll). By default
	// (false) Arm writes memory.high = threshold, which both raises the
	// kernel's event and slows the cgroup's allocators while the
	// consumer acts. Ignored on v1.
	LeaveHigh bool
	// PollEvery is the poll interval with LeaveHigh; 0 means
	// DefaultPollEvery.
	PollEvery time.Duration
	// Coalesce is the minimum spacing of fires; 0 means
	// DefaultCoalesce, negative disables coalescing.
	Coalesce time.Duration
	// Buffer is C's capacity; 0 means DefaultBuffer.
	Buffer int
	// Store (v2: KindMemoryHigh, the working-set assist) is the agent's
	// state store, where the memory.high found before the first write is
	// recorded (kind RecordKind, keyed by the directory, holding the
	// cgroup's inode) durably and before that first write: a Tripwire
	// started after one that never closed (a crash) puts the real
	// original back at New instead of keeping the threshold left behind.
	// An unreadable record is quarantined by the store and memory.high
	// repaired from Unarmed and Written. nil keeps the original in memory
	// only, lost with the process.
	Store *statestore.Store
	// LegacyStateDir is the directory of the state files of the
	// Tripwire before the state store: the file of the watched directory,
	// if any, is moved into Store once (a malformed one is renamed aside
	// with ".corrupt" and repaired from). "" reads none. Only with Store.
	LegacyStateDir string
	// Unarmed is the memory.high the watched directory has without a
	// live agent, restored when the record of the original is unreadable
	// and memory.high holds a value in Written; "" is DefaultUnarmed.
	Unarmed string
	// Written bounds the memory.high values a Tripwire of this
	// configuration can have written (its lines, and the assist's
	// allowance for page cache above them): after an unreadable record
	// only a value within it is taken for the Tripwire's and replaced by
	// Unarmed; anything else is left alone and logged. The zero value
	// holds nothing: nothing is replaced.
	Written HighRange
	// SelfPID is the process memory.high must never throttle; 0 is this
	// process. When it runs at or beneath the watched directory (guard
	// mode's own pod, beneath kubepods), the working-set poll runs
	// without the assist and KindMemoryHigh is refused (ErrUnsupported):
	// memory.high throttles the whole subtree.
	SelfPID int
	// Logger receives the few lines that are not per event (a removed
	// cgroup, a memory.high changed by someone else); nil discards.
	Logger *slog.Logger
	// Now is the clock of Fire.At and of coalescing; nil is time.Now.
	Now func() time.Time

	// assistMin: withDefaults chose DefaultAssistMinPeriod, which the
	// working-set poll drops to DefaultMinPeriod when it runs without
	// the assist after all (see withoutAssist).
	assistMin bool
}

func (o Options) withDefaults() Options {
	if o.PollEvery <= 0 {
		o.PollEvery = DefaultPollEvery
	}
	if o.Mechanism == "" {
		o.Mechanism = KindWorkingSet
	}
	if o.LeaveHigh {
		o.Mechanism = KindPoll
	}
	if o.MaxRate == 0 {
		o.MaxRate = DefaultMaxRate
	}
	if o.MinPeriod <= 0 {
		o.MinPeriod = DefaultMinPeriod
		if o.Mechanism == KindWorkingSet && !o.NoAssist {
			o.MinPeriod, o.assistMin = DefaultAssistMinPeriod, true
		}
	}
	if o.MaxPeriod <= 0 {
		o.MaxPeriod = DefaultMaxPeriod
	}
	o.MaxPeriod = max(o.MaxPeriod, o.MinPeriod)
	if o.Floor <= 0 {
		o.Floor = DefaultFloor
	}
	if o.Hysteresis == 0 {
		o.Hysteresis = DefaultHysteresis
	}
	if o.Coalesce == 0 {
		o.Coalesce = DefaultCoalesce
	}
	if o.Buffer <= 0 {
		o.Buffer = DefaultBuffer
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.SelfPID == 0 {
		o.SelfPID = os.Getpid()
	}
	return o
}

// withoutAssist is o for a working-set poll that found it must not write
// memory.high: NoAssist, and the shorter tick of the poll alone unless
// the caller set one.
func (o Options) withoutAssist() Options {
	o.NoAssist = true
	if o.assistMin {
		o.MinPeriod, o.assistMin = DefaultMinPeriod, false
	}
	return o
}

// New watches dir, a memory cgroup directory: of cgroup v1 when v2 is
// false, of cgroup v2 otherwise (see the package documentation for both
// mechanisms). It starts the reader goroutine; nothing fires before Arm.
// A missing dir matches fs.ErrNotExist, a directory without the
// mechanism's files ErrUnsupported. On error nothing is left open.
func New(dir string, v2 bool, opts Options) (Tripwire, error) {
	opts = opts.withDefaults()
	switch {
	case !v2:
		return newV1(dir, opts)
	case opts.Mechanism == KindPoll:
		return newPoll(dir, opts)
	case opts.Mechanism == KindMemoryHigh:
		return newV2(dir, opts)
	case opts.Mechanism == KindWorkingSet:
		return newWorkingSet(dir, opts)
	default:
		return nil, fmt.Errorf("new tripwire on %s: %w: mechanism %q", dir, ErrUnsupported, opts.Mechanism)
	}
}

func checkThreshold(threshold uint64, file string) error {
	if threshold == 0 {
		return fmt.Errorf("arm tripwire: %w: 0 bytes for %s", ErrInvalidThreshold, file)
	}
	// cgroup files take at most a signed 64-bit byte count.
	if threshold > 1<<63-1 {
		return fmt.Errorf("arm tripwire: %w: %d bytes for %s is above 2^63-1", ErrInvalidThreshold, threshold, file)
	}
	return nil
}
