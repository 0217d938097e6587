// Package cgtest gives privileged tests of every nodeguard package a cgroup
// sandbox of their own: a uniquely named cgroup beneath this process's own
// cgroup in the memory hierarchy and in the cgroup2 hierarchy, processes
// started inside it, limits set on it, and a cleanup that leaves nothing
// behind.
//
// Invariants (the rules of the shared development machines):
//
//   - Cgroups are created only beneath this process's own cgroup, in the
//     hierarchies that cgroups.Layout.Monitored returns, and every one that
//     is created is removed by a t.Cleanup registered before it exists.
//   - Only processes found in a sandbox's cgroup.procs (or its
//     descendants') are ever signalled, by pidfd after a re-read
//     (cgroups.SigkillTree, EmptyTree), so a recycled pid is never hit.
//     Reading, writing and removing go through the cgroups package's file
//     helpers too (Procs, WriteFile, EnableControllers, RemoveTree). No process is moved out of an existing cgroup; Start moves only
//     the process it just started, into cgroups it created.
//   - Limits are written only to cgroups this package created.
//   - Every wait is bounded in time.
//   - A test that cannot run here skips with its reason, unless
//     NODEGUARD_REQUIRE_PRIVILEGED=1, when it fails instead (CI sets it).
package cgtest
