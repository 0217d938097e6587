// Package oomadj raises the oom_score_adj of a pod's processes (the next
// victim's, so that the kernel OOM killer, if it fires before the
// eviction, takes the pod the policy chose) and puts back the value each
// process had. A process is named by its pid and its start time, since
// pids are recycled: a value is only ever written back to the process it
// was read from.
//
// Invariants:
//   - With a state store (NewRaiser, Persist), a pod's raise record (every
//     raised process and what it had) is in place, written and renamed
//     atomically, before any of its processes is raised, and is removed
//     only once every value is back. An agent that dies between the two (a
//     SIGKILL, the watchdog's abort) leaves the record for the next one.
//     The record is staged (unsynced) before the raise and fsynced after
//     it, outside the Raiser's lock: the raise happens under memory
//     pressure, when an fsync waits on writeback. A power loss before the
//     fsync may lose the record, and ends the pods it describes too.
//   - Repair, at start and before anything raises, puts back what such
//     records hold: each process that still runs (same pid and start
//     time) gets its own value, and a process forked from one since (which
//     inherited the raised value, and still has it) its nearest recorded
//     ancestor's. The record is then removed.
//   - A raise record that cannot be read is quarantined by the store and
//     its pod handed to the caller's Lost: what the processes had is lost,
//     and the safe value is the kubelet's own policy (Due): each of the
//     pod's processes that still has the raised value gets the highest
//     value the kubelet gives any container of the pod. That never makes a
//     process more protected than the kubelet made it, and ends the raise.
//     Where the pod's spec is not known the processes are left, and logged.
//   - A second raise of a pod before its restore keeps the values from
//     before the first, also across an agent's restart (the record on disk
//     is read when memory has none): the raised value is never recorded
//     as a process's own.
package oomadj
