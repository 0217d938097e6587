package cgstat

import (
	"math"

	"github.com/nodeguard/nodeguard/psi"
)

// Unlimited is the value of a limit that is not set: "max" in a cgroup2
// file, or on v1 the kernel's PAGE_COUNTER_MAX (9223372036854771712 with
// 4 KiB pages) and anything else at or above v1UnlimitedFloor.
const Unlimited uint64 = math.MaxUint64

// v1UnlimitedFloor is the smallest v1 limit read as Unlimited. The kernel
// reports "no limit" as PAGE_COUNTER_MAX pages, which is LONG_MAX rounded
// down to the page size; masking off 1 MiB covers every page size Linux
// supports, and a real limit within 1 MiB of 8 EiB does not exist.
const v1UnlimitedFloor uint64 = math.MaxInt64 &^ (1<<20 - 1)

// Fields is a set of Memory fields. Memory.Fields says which of the fields
// that a kernel or a cgroup version may lack were reported; a field not in
// the set is zero (or Unlimited for High) and means "not reported", never
// "zero".
type Fields uint32

// The optional Memory fields. Usage, Limit, Anon, File, ActiveFile,
// InactiveFile, Events.Max and Events.OOMKill are always reported.
const (
	// FieldHigh: High (cgroup2 memory.high; v1 has no equivalent).
	FieldHigh Fields = 1 << iota
	// FieldShmem: Shmem (memory.stat "shmem", v1 "total_shmem").
	FieldShmem
	// FieldWorkingsetRefaultAnon: WorkingsetRefaultAnon (Linux 5.9+;
	// anonymous pages had no refault detection before).
	FieldWorkingsetRefaultAnon
	// FieldWorkingsetRefaultFile: WorkingsetRefaultFile (before 5.9
	// memory.stat called it "workingset_refault").
	FieldWorkingsetRefaultFile
	// FieldWorkingsetActivate: WorkingsetActivate (cgroup2 only; v1
	// memory.stat does not have it).
	FieldWorkingsetActivate
	// FieldWorkingsetRestore: WorkingsetRestore (cgroup2 only).
	FieldWorkingsetRestore
	// FieldEventsLow: Events.Low (cgroup2 only).
	FieldEventsLow
	// FieldEventsHigh: Events.High (cgroup2 only).
	FieldEventsHigh
	// FieldEventsOOM: Events.OOM (cgroup2 only; v1 signals OOMs through
	// eventfd, not a counter).
	FieldEventsOOM
	// FieldEventsOOMGroupKill: Events.OOMGroupKill (cgroup2, Linux 5.17+).
	FieldEventsOOMGroupKill
	// FieldUnderOOM: UnderOOM (v1 only).
	FieldUnderOOM
	// FieldPSI: PSI (a memory.pressure file in the cgroup's cgroup2
	// directory).
	FieldPSI
)

// Has reports whether every field in x is in f.
func (f Fields) Has(x Fields) bool { return f&x == x }

// Memory is one reading of a cgroup's memory statistics. Usage and the
// memory.stat figures cover the cgroup and its descendants on v1 (the
// total_* keys) as on cgroup2; see MemoryEvents for the counters.
type Memory struct {
	// Usage is the memory charged to the cgroup and its descendants, in
	// bytes: memory.current (v2), memory.usage_in_bytes (v1).
	Usage uint64
	// Limit is the cgroup's own hard limit in bytes, Unlimited when none:
	// memory.max (v2), memory.limit_in_bytes (v1). A limit of an ancestor
	// may be lower.
	Limit uint64
	// High is the throttling threshold memory.high in bytes, Unlimited
	// when none. Reported on cgroup2 only (FieldHigh).
	High uint64

	// Anon is anonymous memory ("anon"; v1 "total_rss"), File the page
	// cache including tmpfs and shmem ("file"; v1 "total_cache"),
	// ActiveFile and InactiveFile the page cache on the active and
	// inactive LRU lists, Shmem tmpfs and shared memory (FieldShmem). All
	// in bytes.
	Anon, File, ActiveFile, InactiveFile, Shmem uint64

	// Workingset counters from memory.stat: refaults of evicted anonymous
	// and file pages, refaulted pages activated immediately, and refaulted
	// pages that were part of the workingset when evicted. Cgroup2 splits
	// activate and restore into _anon and _file: they are summed here.
	// Each is reported only when its Field is set.
	WorkingsetRefaultAnon, WorkingsetRefaultFile, WorkingsetActivate, WorkingsetRestore uint64

	// Events are the memory event counters.
	Events MemoryEvents
	// UnderOOM is v1's under_oom flag (FieldUnderOOM): the cgroup is in
	// OOM and its OOM killer is disabled.
	UnderOOM bool
	// PSI is the memory pressure of the cgroup (FieldPSI): its
	// memory.pressure, parsed by package psi.
	PSI psi.Stats

	// Fields says which optional fields were reported.
	Fields Fields
}

// WorkingSet returns Usage minus InactiveFile, floored at 0: the kubelet's
// memory.available and cAdvisor's container_memory_working_set_bytes
// definition. cAdvisor computes it in container/libcontainer/handler.go,
// setMemoryStats, from total_inactive_file on v1 and inactive_file on v2,
// which is what InactiveFile holds. It is CgroupMemory's WorkingSet.
func (m *Memory) WorkingSet() uint64 { return m.CgroupMemory().WorkingSet() }

// MemoryEvents are memory event counters: cgroup2 memory.events, which
// counts events in the cgroup and its descendants. On v1, OOMKill is
// "oom_kill" of memory.oom_control, which counts only kills of tasks in the
// cgroup itself, not in its descendants (measured on Linux 6.18): on v1 a
// pod's kills are in its container cgroups. Max on v1 is
// memory.failcnt plus memory.memsw.failcnt when swap is accounted: how often
// a charge hit this cgroup's memory or memory+swap limit, the event cgroup2
// counts as "max". (The kernel charges memory+swap first, so with equal
// limits, as runc sets them for pods without swap, only memsw fails; Linux
// 6.18 counts failcnt for neither counter then, and Max stays 0.) The other
// events are not reported on v1 (see Fields).
type MemoryEvents struct {
	Low, High, Max, OOM, OOMKill, OOMGroupKill uint64
}
