// Package pressure is nodeguard's SENSE room: what the node feels.
//
// It composes three leaf packages into one consistent Snapshot per tick:
// psi (pressure stall information, files and triggers), cgstat (cgroup
// memory statistics, v2 and v1) and nodestats (/proc/meminfo, /proc/vmstat,
// statfs, pids), and computes the kubelet's eviction signals from them.
//
// Invariants:
//   - Sensing only: no decision is taken here, and nothing here knows about
//     pods; cgroups are identified by id (the memory cgroup's kernfs id in
//     its hierarchy), paths are labels.
//   - One Snapshot reads each file once, through descriptors kept open
//     between ticks (pread at offset 0), so a tick of hundreds of cgroups
//     costs a few milliseconds.
//   - A statistic that cannot be read is an error in the Snapshot, never a
//     zero: a cgroup that vanished is dropped, one that fails to parse is
//     kept with its error.
//   - The set of cgroups follows the monitored subtrees: rescanned every
//     RescanEvery (a cgroup known before the walk and not found by it is
//     retired) and updated at once through Add and Remove (fed by the
//     kernel's cgroup_mkdir/rmdir events).
//   - Hot cgroups (Config.Hot) are read on every snapshot; cold ones when
//     admitted and then only by a snapshot that asks for them
//     (SnapshotCold, Sensor.Scrape): a snapshot carries their last
//     reading, with its time, and never a zero for an unread one.
package pressure
