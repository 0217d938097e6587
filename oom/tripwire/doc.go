// Package tripwire tells, within milliseconds, that the memory usage of one
// cgroup (the pod root, "kubepods") reached a byte threshold, from an event
// the kernel raises at the charge, instead of at the next poll. It only
// senses: what a crossing means is decided by package oom, which confirms
// every Fire on a fresh snapshot.
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
// cgroup v2 (v2=true; Kind "memory.high"): there is no usage threshold
// event, so Arm writes memory.high = threshold. Above memory.high the
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
// someone else changed it since, which is logged and left alone.
//
// With Options.LeaveHigh (v2 only) memory.high is never written; since v2
// then has no usage event at all, the Tripwire polls memory.current every
// Options.PollEvery (Kind "poll") and fires on each upward crossing. That
// is the fallback for a pod root whose memory.high belongs to someone else,
// with the poll's latency.
//
// Fires are coalesced to at most one per Options.Coalesce (default 1 ms):
// kernel signals closer together are counted (Stats.Coalesced), not
// delivered.
//
// Invariants:
//
//   - The reader never blocks on the consumer: a Fire that does not fit in
//     the channel is dropped and counted (Dropped), and the hot path never
//     logs.
//   - Files are opened beneath the directory by fixed names (openat on a
//     directory descriptor); nothing is written but cgroup.event_control
//     (v1) and memory.high (v2, unless LeaveHigh) of that one directory.
//   - Close stops the reader goroutine, waits for it, closes every
//     descriptor (on v1 this removes the kernel registration), and then
//     closes C; Done is closed when the reader has returned. Close is
//     idempotent.
//   - Errors name the file and, for writes, the value. A missing directory
//     matches fs.ErrNotExist; a directory without the files of the asked
//     hierarchy matches ErrUnsupported; a bad threshold matches
//     ErrInvalidThreshold; content that does not parse matches
//     ErrMalformed; use after Close matches ErrClosed; a removed cgroup
//     matches ErrGone. An unreadable value is never taken as zero.
package tripwire
