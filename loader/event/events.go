package event

import "math/bits"

// Event is one decoded record. Every concrete type of this package (*OOMKill,
// *Reclaim, *Cgroup, *OOMScoreAdj, *Exit, *Bench) satisfies it through its
// embedded Header; use a type switch to reach the body.
type Event interface {
	// Hdr returns the record's header. It points into the event: changing
	// it changes the event.
	Hdr() *Header
}

// Header is struct ng_header, the first 40 bytes of every record.
type Header struct {
	Kind    Kind
	Version uint8 // the layout version of this kind, checked by Decode
	Flags   Flags
	CPU     uint32 // the CPU the BPF program ran on
	PID     uint32 // thread-group id: what userspace calls the pid
	TID     uint32 // thread id
	// TimestampNS is bpf_ktime_get_ns() when the record was made: CLOCK_MONOTONIC
	// in nanoseconds, which does not advance during suspend and is not wall time.
	TimestampNS uint64
	// MemcgID is the id (kernfs node id, the directory's inode number) of the
	// cgroup that holds the task's memory controller: a v1 memory cgroup on
	// hybrid hosts, the cgroup2 cgroup on pure v2 hosts. 0 when unknown.
	MemcgID uint64
	// CgroupID is the task's cgroup2 (unified) id, as
	// bpf_get_current_cgroup_id(). 0 when unknown.
	CgroupID uint64
}

// Hdr returns h itself, so that every type embedding Header is an Event.
func (h *Header) Hdr() *Header { return h }

// PageSize is the page size assumed when pages are turned into bytes
// (OOMKill.RSSBytes, the "rss_bytes" JSON field). The records carry page
// counts and not the kernel's page size; 4 KiB is the page size of every
// amd64 kernel, nodeguard's target.
const PageSize = 4096

// OOMKill is NG_KIND_OOM_KILL, from oom/mark_victim: the kernel OOM killer
// chose a victim. The header describes the victim.
type OOMKill struct {
	Header
	Comm        string // the victim's comm
	OOMScoreAdj int32  // the victim's oom_score_adj
	TriggerPID  uint32 // the task whose allocation invoked the OOM killer
	// Memory of the victim, in pages.
	TotalVMPages  uint64
	AnonRSSPages  uint64
	FileRSSPages  uint64
	ShmemRSSPages uint64
	// MemcgLevel is the depth of the victim's memcg in its hierarchy.
	MemcgLevel uint32
	// MemcgHierarchy is the hierarchy id of the victim's memcg (0 is
	// cgroup2), the key that goes with MemcgID.
	MemcgHierarchy uint32
}

// RSSPages returns the victim's resident set (anon + file + shmem) in pages,
// saturating at the largest uint64 instead of wrapping on nonsense input.
func (e *OOMKill) RSSPages() uint64 {
	return addSat(addSat(e.AnonRSSPages, e.FileRSSPages), e.ShmemRSSPages)
}

// RSSBytes returns RSSPages times PageSize, saturating like RSSPages.
func (e *OOMKill) RSSBytes() uint64 {
	hi, lo := bits.Mul64(e.RSSPages(), PageSize)
	if hi != 0 {
		return ^uint64(0)
	}
	return lo
}

func addSat(a, b uint64) uint64 {
	s, carry := bits.Add64(a, b, 0)
	if carry != 0 {
		return ^uint64(0)
	}
	return s
}

// Reclaim is NG_KIND_RECLAIM: one reclaim episode that lasted longer than the
// configured minimum. The header describes the stalled task; for kswapd it is
// the kswapd thread, with MemcgID and CgroupID 0.
type Reclaim struct {
	Header
	Type        ReclaimType
	Order       int32  // allocation order (log2 of the pages asked for)
	GFPFlags    uint32 // gfp_t of the allocation
	NID         uint32 // NUMA node, kswapd only
	DurationNS  uint64 // how long the episode lasted
	NrReclaimed uint64 // pages reclaimed in the episode
}

// Cgroup is NG_KIND_CGROUP_MKDIR or NG_KIND_CGROUP_RMDIR (Header.Kind tells
// which): a cgroup directory was made or removed. The header describes the
// task that did it.
type Cgroup struct {
	Header
	ID          uint64 // the cgroup's id (kernfs node id)
	ParentID    uint64 // the parent's id, 0 when unknown (classic tracepoint)
	HierarchyID uint32 // 0 is the unified (cgroup2) hierarchy
	Level       uint32 // depth below the hierarchy root (the root is 0)
	Path        string // relative to the hierarchy root
}

// OOMScoreAdj is NG_KIND_OOM_SCORE_ADJ, from oom/oom_score_adj_update: a
// task's oom_score_adj changed. The header describes that task.
type OOMScoreAdj struct {
	Header
	Comm        string
	OOMScoreAdj int32  // the new value
	WriterPID   uint32 // the task that wrote it
}

// Exit is NG_KIND_EXIT, from sched/sched_process_exit: a process (the last
// thread of a thread group) exited.
type Exit struct {
	Header
	Comm string
	// ExitCode is the kernel's raw wait status: the terminating signal in
	// bits 0-6, the core-dump flag in bit 7, the exit status in bits 8-15.
	ExitCode uint32
}

// Signal returns the signal that terminated the process, 0 when it exited
// normally.
func (e *Exit) Signal() uint32 { return e.ExitCode & 0x7f }

// Status returns the exit status (the argument of exit), meaningful when
// Signal is 0.
func (e *Exit) Status() uint32 { return (e.ExitCode >> 8) & 0xff }

// CoreDumped reports whether the process dumped core.
func (e *Exit) CoreDumped() bool { return e.ExitCode&0x80 != 0 }

// Bench is NG_KIND_BENCH: a synthetic record of the pipeline benchmark and
// the ring overflow test (bpf/bench.bpf.c).
type Bench struct {
	Header
	Seq   uint64 // sequence number, for counting gaps
	Batch uint64 // the batch the record belongs to
}
