// Package cgstat reads cgroup statistics, on cgroup2 and on v1 (including
// the hybrid layout of v1 controllers beside a cgroup2 mount). It only
// senses: it never writes to a cgroup filesystem.
//
// It has two paths, because the cheapest way to read one figure is not the
// cheapest way to read all of them, and a one-shot reading for the
// kubelet's node signals:
//
//   - The fast memory path, Reader, runs every pressure tick for every pod
//     cgroup. It keeps the few files it needs open and re-reads each with
//     one pread at offset 0 into a reused buffer, parsing with zero-alloc
//     parsers written for these files.
//   - The full path, Stater.Full, runs at scrape time for metrics. It reads
//     CPU, throttling, I/O, pids and memory through containerd/cgroups/v3
//     (cgroup1.Load per v1 controller, cgroup2.Load and StatFiltered),
//     which opens, reads and closes a dozen files and allocates freely.
//   - ReadCgroupMemoryV1/V2 read the two figures the kubelet's memory
//     signals take from a cgroup (CgroupMemory: usage and inactive file,
//     as cAdvisor reads them), from any memory cgroup, the root included,
//     which has no memory.current on cgroup2 (usage is then anon + file of
//     its memory.stat, as runc computes it). They open the files once,
//     beneath one directory descriptor, and parse memory.stat with
//     Reader's parser (requiring only the keys they use): there is one
//     memory.stat parser.
//
// Invariants:
//
//   - Nothing here writes to a cgroup file or creates, removes or moves
//     anything.
//   - A figure that was not read is never reported as 0: required figures
//     fail the reading, optional ones are flagged in Memory.Fields, and a
//     Full section that was not read is nil. v1 "no limit" and cgroup2
//     "max" are both Unlimited.
//   - A cgroup that was removed gives an error matching ErrGone (kernfs
//     answers ENODEV on a kept-open file of a removed cgroup; a path that
//     no longer exists is gone too). A file that does not parse gives a
//     *ParseError matching ErrMalformed. A required file missing from an
//     existing cgroup gives ErrUnsupported. Callers tell them apart with
//     errors.Is.
//   - Reader.Read allocates nothing once its files are open (tested with
//     testing.AllocsPerRun) and reads each file with exactly one pread
//     unless its content outgrows the buffer, which then grows once.
//   - A Reader opens all the files of one directory through one directory
//     descriptor, beneath it and without following symbolic links, so its
//     files belong to one cgroup even when the path is recycled; after a
//     removal it keeps failing with ErrGone and never re-opens the path.
//   - On v1 the memory.stat figures are hierarchical, as on cgroup2 (the
//     total_* keys). The v1 event counters are not: failcnt counts hits of
//     the cgroup's own limit and oom_kill only kills of its own tasks.
//   - WorkingSet is Usage minus InactiveFile, floored at 0, exactly as the
//     kubelet and cAdvisor compute it; Memory's is CgroupMemory's.
//   - v1 paths given to containerd are the cgroup's path within each
//     hierarchy, taken from that hierarchy's own directory (cgroups.Dir),
//     never one path for all hierarchies: nodeguard's own cgroup differs
//     between them (on the development machines it is
//     /process_api/<hash> in the memory hierarchy and / in the others).
//
// Memory PSI (the cgroup2 memory.pressure, also on hybrid hosts) is parsed
// by package psi, whose Parse allocates nothing either.
package cgstat
