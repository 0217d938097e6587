// Package tripwire tells, within milliseconds, that the memory of one
// cgroup (the pod root, "kubepods") reached a byte threshold: its usage on
// cgroup v1, from an event the kernel raises at the charge; its working
// set on cgroup v2, from a poll whose period shrinks with the distance to
// the line (an event at the charge exists there only as memory.high, which
// throttles every pod). It only senses: what a crossing means is decided
// by package eviction, which confirms every Fire on a fresh snapshot.
//
// # Mechanisms
//
// cgroup v1 (New with v2=false; Kind "usage_threshold"): Arm opens an
// eventfd and writes "<eventfd> <fd of memory.usage_in_bytes> <threshold>"
// to cgroup.event_control (Documentation/admin-guide/cgroup-v1/memory.rst,
// "Memory thresholds"). The kernel signals the eventfd each time usage
// crosses the threshold, in EITHER direction; it checks thresholds in the
// charge and uncharge paths, rate-limited to once per 128 page events per
// CPU, so a crossing is seen within ~512 KiB per CPU of allocation. A
// registration cannot be moved: re-arming registers a new eventfd and then
// closes the old one, which makes the kernel drop the old registration
// (asynchronously, from a workqueue). The eventfd counter tells how many
// crossings happened since the last read; the reader then re-reads usage:
// a single crossing with usage now below the threshold is a downward one
// and is counted (Stats.Downward), not delivered. Anything else (usage at
// or above the threshold, or two or more crossings, i.e. a spike that went
// up and came back) is delivered. A spike shorter than the reader's
// wake-up that is read as one crossing after usage already fell back is
// counted as downward: the consumer misses a peak that is already over.
// When the cgroup is removed the kernel signals the eventfd one last time;
// usage is then unreadable, and the Tripwire stops with ErrGone.
//
// cgroup v2, the default (v2=true; Kind "working_set"): the kernels of
// the production nodes (Debian's 6.1 and 6.12) have no usage threshold
// event and no per-charge memcg tracepoint (only
// vmscan/mm_vmscan_memcg_reclaim_*, which fire when a limit already makes
// the cgroup reclaim). The only event at the charge is memory.high, which
// throttles every cgroup below once usage is past it; so the Tripwire
// watches the working set (usage minus inactive_file, the kubelet's and
// cAdvisor's) with two things together:
//
//   - An adaptive poll: a one-shot timerfd re-armed after every tick for
//     the time a ramp at Options.MaxRate (2 GiB/s) needs to cover the
//     distance to the line, within [Options.MinPeriod, Options.MaxPeriod]
//     (5 ms with the assist, 1 ms without; 100 ms). Each tick reads
//     memory.current; memory.stat is read on the reader's path only at or
//     above the line (the working set is never above usage), and near the
//     line (within MaxRate x MaxPeriod)
//     a goroutine of its own refreshes inactive_file every 100 ms, off
//     the reader's path (the kernel flushes the subtree's statistics for
//     every memory.stat read, which under a fast charger takes long), so
//     that the tick that sees usage cross can fire on usage minus that
//     inactive_file at once. A ramp at or below MaxRate cannot cross
//     between two ticks by more than MinPeriod of allocation.
//   - The memory.high assist (unless Options.NoAssist): memory.high kept
//     at the usage where the working set meets the line, the line plus
//     inactive_file, never less than one charge batch above usage (moved
//     down at once, up only by more than Hysteresis), and inotify on
//     memory.events.local: the charge that brings the working set to the
//     line raises "high", which is read as a tick at once (at most every
//     2 ms). Page cache that holds usage above the line is then below
//     memory.high, neither reclaimed nor throttled by it; a page cache
//     growth that reaches memory.high costs one event and a move up. While
//     the working set is above the line memory.high stays where the
//     crossing put it, which slows the allocators while the consumer acts.
//     Close restores the original memory.high (recorded in Options.Store,
//     see "State and crash repair"). Not when the agent's own process runs
//     beneath the directory: see "The agent's own pod".
//
// It fires when the working set reaches the line (Fire.WorkingSet), once:
// again only after the working set has come back below the line minus
// Options.Hysteresis (2 MiB, counted as Downward), and never sooner than
// Options.Floor (20 ms) after the previous fire (a crossing within the
// floor is counted as Coalesced and delivered when the floor has passed,
// if the working set is still above). A line the consumer has judged does
// not wake it again while the working set stays there, and page cache
// above the line never wakes it. Page cache that grew by more than the
// working set's headroom within the 100 ms since the last refresh can
// cost one early fire, corrected on the next tick. With NoAssist and a
// Store it still puts back, at New, a memory.high left armed by a
// Tripwire of the same cgroup that never closed. BenchmarkV2Mechanisms
// measures it (with and without the assist) against memory.high and PSI;
// docs/benchmarks.md has the figures.
//
// cgroup v2 with Options.Mechanism KindMemoryHigh (Kind "memory.high"):
// Arm writes memory.high = threshold. Above memory.high the
// kernel throttles the cgroup's allocators (reclaim on return to user
// space, then a sleep that grows with the square of the overage, up to 2 s
// per attempt) and increments "high" in memory.events.local (each time
// reclaim runs because this cgroup is above its own high, which while the
// cgroup stays above high is on nearly every charge batch: very frequent).
// Every increment notifies the file (kernfs_notify, which inotify reports
// as IN_MODIFY; the kernel rate-limits these to one per 10 ms per file).
// The reader watches memory.events.local with inotify, re-reads the high
// counter to confirm (the file also changes for max, oom and oom_kill), and
// delivers a Fire with Count = the high counter. memory.events.local is
// used rather than memory.events because the latter is hierarchical: a
// child cgroup above ITS OWN memory.high increments the parent's "high" too.
// (memory.events is the fallback on kernels without the .local file.)
// Writing memory.high below current usage makes the WRITER reclaim down
// to it synchronously: Arm may then take as long as that reclaim (Arm
// opens the file with O_NONBLOCK, which recent kernels take as "set the
// limit, skip the reclaim" and older ones ignore). Close writes back the
// memory.high that was there before the first Arm (usually "max"), unless
// someone else changed it since, which is logged and left alone. With
// Options.Store that original is recorded durably before the first write
// (see "State and crash repair"). New refuses it (ErrUnsupported) when the
// agent's own process runs beneath the directory. Its costs (every pod
// below the cgroup throttled while page cache holds usage above the line,
// a "high" event per charge batch) are why it is not the default.
//
// # State and crash repair
//
// With Options.Store (the agent's state store, package
// internal/statestore), the memory.high found before the first write is
// put as a record of kind RecordKind ("tripwire-memory-high"), keyed by
// the directory's path and holding the cgroup's inode, atomically and
// durably before that first write, and deleted once the original is back
// (Close). At New, a Tripwire finds what one that never closed (a crash, a
// SIGKILL) left:
//
//   - A record of this very cgroup (same inode): its original is put back
//     at once, over the threshold left there, and the record deleted; a
//     write that fails leaves it to Close.
//   - A record of another cgroup that had the same path: deleted, unused.
//   - A record that cannot be read (torn, bad checksum, a payload that
//     does not decode or validate): the store quarantines it (moved to
//     quarantine/tripwire-memory-high/, logged, counted in
//     nodeguard_state_records_quarantined_total). The record is put before
//     the first write, so a Tripwire was writing memory.high: what is
//     there now is what it left, or what someone wrote since. Only a
//     value within Options.Written (the values a Tripwire of the agent's
//     configuration can write: its lines, plus the assist's allowance for
//     page cache) is taken for the Tripwire's and replaced by
//     Options.Unarmed, the value without an agent ("max" by default: the
//     kubelet never writes memory.high on kubepods). Anything else ("max"
//     where the configuration says otherwise, a value above every line) is
//     left alone, and logged: the agent never tears down what it does not
//     recognise. New does not fail; the Tripwire runs.
//   - A record of a newer agent (ErrUnsupported, left in place for it) or
//     a store that cannot be read: nothing recorded can be trusted and no
//     write could be undone after a crash, so memory.high is left as found
//     and never written (the working-set poll runs without the assist,
//     KindMemoryHigh's Arm fails), logged once.
//
// Options.LegacyStateDir names the directory of the JSON state file of
// the Tripwire before the store; the file of the watched directory is
// moved into the store once (read, put, removed). One that does not parse
// is renamed aside (".corrupt") and repaired from as an unreadable
// record. A failed New puts back what it could not yet, and Close
// restores on every stop; a stop that restores nothing (SIGKILL, a
// failed write) leaves the record for the next New.
//
// # The agent's own pod
//
// memory.high throttles every task of the directory's whole subtree. Guard
// mode's DaemonSet runs the agent in a pod beneath kubepods: an assist on
// kubepods would throttle the agent together with the pods it must save,
// right when it must act. New therefore looks for the agent's own process
// (Options.SelfPID, this process by default) at or beneath the directory,
// by the pids in each cgroup's cgroup.procs (in a container with a cgroup
// namespace of its own /proc/self/cgroup reads "/", which names nothing on
// the host's tree; cgroup.procs lists pids in the reader's pid namespace,
// where the process's own pid is its own). When it is there (or the
// search fails), the working-set poll runs without the assist, at the
// poll's own shortest tick (DefaultMinPeriod, 1 ms near the line, inside
// the 10 ms detection target), logged once; KindMemoryHigh is refused. The
// alternative, the assist on each QoS and pod cgroup but the agent's own,
// was rejected: a memory.high per child cannot tell the sum of the pods'
// working sets reaching the line (each child's share would have to be
// guessed), it would write cgroups the kubelet creates and removes with
// every pod, and a Burstable agent shares its QoS cgroup with the pods.
// The assist's other gain, throttling the allocators while the consumer
// acts, is given up there; the PSI triggers and the poll still wake it.
//
// With Options.LeaveHigh or Mechanism KindPoll (v2), the Tripwire polls
// memory.current every Options.PollEvery (Kind "poll") and fires on each
// upward crossing of usage, with the poll's fixed latency and cost.
//
// Fires of the event-driven mechanisms (v1, memory.high) and of the fixed
// poll are coalesced to at most one per Options.Coalesce (default 1 ms):
// kernel signals closer together are counted (Stats.Coalesced), not
// delivered. The working-set poll has its floor and hysteresis instead.
//
// Invariants:
//
//   - The reader never blocks on the consumer: a Fire that does not fit in
//     the channel is dropped and counted (Dropped), and the hot path never
//     logs.
//   - Files are opened beneath the directory by fixed names (openat on a
//     directory descriptor); nothing is written but cgroup.event_control
//     (v1) and memory.high (v2: KindMemoryHigh, the working-set assist,
//     and restoring an original) of that one directory, and its record in
//     Options.Store. New reads the cgroup.procs of the directory's subtree
//     (directories opened beneath it, never by symlink), once.
//   - The working-set assist never writes a memory.high below usage plus
//     one charge batch, so it never makes the writer reclaim and never
//     throttles page cache held above the line.
//   - With a Store, the original memory.high is on disk before the first
//     write to memory.high, and a record is only ever used for the cgroup
//     whose inode it names. A bad record never fails New; after one, only
//     a memory.high within Options.Written is replaced.
//   - memory.high is never written on a directory the agent's own process
//     runs beneath.
//   - The working-set poll delivers a line once per crossing: again only
//     after the working set went below threshold - Hysteresis, and never
//     two fires within Floor. Its tick is never shorter than MinPeriod,
//     and its reader never waits for a memory.stat read below the line.
//   - Close stops the reader goroutine (and the working-set refresher),
//     waits for them, restores memory.high where it was written, closes
//     every descriptor (on v1 this removes the kernel registration), and
//     then closes C; Done is closed when the reader has returned. Close is
//     idempotent.
//   - Errors name the file and, for writes, the value. A missing directory
//     matches fs.ErrNotExist; a directory without the files of the asked
//     hierarchy matches ErrUnsupported; a bad threshold matches
//     ErrInvalidThreshold; content that does not parse matches
//     ErrMalformed; use after Close matches ErrClosed; a removed cgroup
//     matches ErrGone. An unreadable value is never taken as zero.
package tripwire
