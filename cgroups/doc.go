// Package cgroups discovers the host's cgroup hierarchies and maps cgroup
// paths between the three spellings nodeguard meets: paths the user gives
// (relative to nodeguard's own cgroup, or absolute within a hierarchy),
// paths the kernel reports (hierarchy id plus a path within that hierarchy,
// as in the cgroup tracepoints), and filesystem paths under the mounts. It
// also holds the cgroup file operations every user of the tree shares
// (files.go: reading cgroup.procs, writing, removing, killing; tasks.go:
// counting a tree's tasks, from pids.current where the pids controller
// is).
//
// It supports the three layouts found in the field: pure cgroup v2
// (production), the hybrid layout of v1 controllers plus a cgroup2 mount
// (the development machines, where the memory controller is on v1), and pure
// v1 with no cgroup2 mount.
//
// Invariants:
//
//   - Discovery only reads: /proc/self/mountinfo, /proc/self/cgroup and the
//     cgroup.controllers file at the root of each cgroup2 mount. The parsers
//     read through an injected fs.FS, so every layout is tested against
//     fixture files.
//   - Malformed host files give a *ParseError that names the file and line
//     and matches ErrMalformed; a host without usable cgroups gives an error
//     matching ErrUnsupported. Callers tell them apart with errors.Is.
//   - Every Hierarchy pointer in a Layout (Unified, Memory, Dir.Hierarchy)
//     points into Layout.Hierarchies; NewLayout, which Discover uses, makes
//     them so.
//   - Resolving never lets ".." climb above its base: above this process's
//     own cgroup for relative paths, above the hierarchy root for absolute
//     ones. Such paths are rejected with ErrInvalidPath, never clamped.
//   - A cgroup is identified by its id (the kernfs node id, which is the
//     directory's inode number); paths are labels that the kernel recycles.
//   - Discovery, resolving and ids only read. What changes a cgroup
//     filesystem is in files.go and leaf.go, used by every other package
//     (kubepods, cgtest, the bench, the test runtime) instead of their own
//     copies: WriteFile (one write(2)), EnableControllers, Rmdir and
//     RemoveTree (deepest first; EBUSY retried only while cgroup.procs is
//     empty), Kill, SigkillTree and EmptyTree, MoveSelfIntoLeaf. They act
//     on directories the caller resolved, under fixed file names.
//   - A process is signalled through a cgroup only after it was pinned
//     with a pidfd and its cgroup.procs, read again, still lists it (or
//     all at once through cgroup.kill): a pid that the kernel recycled
//     for a process outside the cgroup is never hit.
package cgroups
