package event

import "strconv"

// HeaderSize is the size in bytes of struct ng_header, which starts every
// record.
const HeaderSize = 40

// Kind is ng_header.kind: what a record describes and so which layout its
// body has. Numbers are never reused.
type Kind uint16

// The kinds of enum ng_kind.
const (
	KindOOMKill     Kind = 1 // NG_KIND_OOM_KILL, decoded as *OOMKill
	KindReclaim     Kind = 2 // NG_KIND_RECLAIM, decoded as *Reclaim
	KindCgroupMkdir Kind = 3 // NG_KIND_CGROUP_MKDIR, decoded as *Cgroup
	KindCgroupRmdir Kind = 4 // NG_KIND_CGROUP_RMDIR, decoded as *Cgroup
	KindOOMScoreAdj Kind = 5 // NG_KIND_OOM_SCORE_ADJ, decoded as *OOMScoreAdj
	KindExit        Kind = 6 // NG_KIND_EXIT, decoded as *Exit
	KindBench       Kind = 7 // NG_KIND_BENCH, decoded as *Bench
)

// Layout versions (NG_VERSION_*), one per kind: the only versions Decode
// accepts.
const (
	versionOOMKill     = 1
	versionReclaim     = 1
	versionCgroup      = 1
	versionOOMScoreAdj = 1
	versionExit        = 1
	versionBench       = 1
)

// Record sizes in bytes (sizeof the C structs), asserted by the golden tests.
const (
	sizeOOMKill     = 104
	sizeReclaim     = 72
	sizeCgroup      = 320
	sizeOOMScoreAdj = 64
	sizeExit        = 64
	sizeBench       = 56
)

// Buffer lengths of the C strings (NG_COMM_LEN, NG_PATH_LEN).
const (
	commLen = 16
	pathLen = 256
)

// layout returns the version and size of kind k's records, and whether k is
// known at all.
func layout(k Kind) (version uint8, size int, ok bool) {
	switch k {
	case KindOOMKill:
		return versionOOMKill, sizeOOMKill, true
	case KindReclaim:
		return versionReclaim, sizeReclaim, true
	case KindCgroupMkdir, KindCgroupRmdir:
		return versionCgroup, sizeCgroup, true
	case KindOOMScoreAdj:
		return versionOOMScoreAdj, sizeOOMScoreAdj, true
	case KindExit:
		return versionExit, sizeExit, true
	case KindBench:
		return versionBench, sizeBench, true
	}
	return 0, 0, false
}

// Size returns the size in bytes of kind k's records (header included), as
// the C struct of the version this package decodes, and whether k is a known
// kind. It lets the loader check its generated bindings against the decoder.
func (k Kind) Size() (int, bool) {
	_, size, ok := layout(k)
	return size, ok
}

// String returns the kind's name as used in logs and JSON: oom_kill, reclaim,
// cgroup_mkdir, cgroup_rmdir, oom_score_adj, exit, bench; or "kind(N)" for a
// number this package does not know.
func (k Kind) String() string {
	switch k {
	case KindOOMKill:
		return "oom_kill"
	case KindReclaim:
		return "reclaim"
	case KindCgroupMkdir:
		return "cgroup_mkdir"
	case KindCgroupRmdir:
		return "cgroup_rmdir"
	case KindOOMScoreAdj:
		return "oom_score_adj"
	case KindExit:
		return "exit"
	case KindBench:
		return "bench"
	}
	return "kind(" + strconv.FormatUint(uint64(k), 10) + ")"
}

// Flags is ng_header.flags, a bit set.
type Flags uint8

// The bits of ng_header.flags (NG_FLAG_*).
const (
	// FlagCgroupOfCurrent: the header's cgroup ids are those of the current
	// task, not of the task the event is about (classic-tracepoint fallbacks
	// that only know the subject's pid).
	FlagCgroupOfCurrent Flags = 0x01
	// FlagTruncated: a string field filled its whole buffer and may have
	// been cut.
	FlagTruncated Flags = 0x02
	// FlagClassicTP: the record came from a classic tracepoint, not tp_btf.
	FlagClassicTP Flags = 0x04
	// FlagNoTaskDetails: the kernel offered no comm, rss or oom_score_adj
	// for this record (classic mark_victim before 6.8); their zeros mean
	// unknown.
	FlagNoTaskDetails Flags = 0x08
)

// Has reports whether every bit of g is set in f.
func (f Flags) Has(g Flags) bool { return f&g == g }

// Names returns the names of the set bits, lowest first: cgroup_of_current,
// truncated, classic_tp, no_task_details, and "0xNN" for a bit this package does not know. It
// returns nil when no bit is set.
func (f Flags) Names() []string {
	if f == 0 {
		return nil
	}
	names := make([]string, 0, 3)
	for bit := Flags(1); bit != 0; bit <<= 1 {
		if f&bit == 0 {
			continue
		}
		switch bit {
		case FlagCgroupOfCurrent:
			names = append(names, "cgroup_of_current")
		case FlagTruncated:
			names = append(names, "truncated")
		case FlagClassicTP:
			names = append(names, "classic_tp")
		case FlagNoTaskDetails:
			names = append(names, "no_task_details")
		default:
			names = append(names, "0x"+hex2(uint8(bit)))
		}
	}
	return names
}

// hex2 formats v as two lower-case hex digits.
func hex2(v uint8) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[v>>4], digits[v&0xf]})
}

// ReclaimType is ng_reclaim.type: which flavour of reclaim stalled.
type ReclaimType uint32

// The reclaim flavours of enum ng_reclaim_type.
const (
	ReclaimMemcg  ReclaimType = 1 // mm_vmscan_memcg_reclaim_begin/end: a cgroup hit its limit
	ReclaimDirect ReclaimType = 2 // mm_vmscan_direct_reclaim_begin/end: the allocating task reclaimed
	ReclaimKswapd ReclaimType = 3 // mm_vmscan_kswapd_wake/sleep: background reclaim of one NUMA node
)

// String returns memcg, direct or kswapd, or "reclaim_type(N)" for a number
// this package does not know.
func (t ReclaimType) String() string {
	switch t {
	case ReclaimMemcg:
		return "memcg"
	case ReclaimDirect:
		return "direct"
	case ReclaimKswapd:
		return "kswapd"
	}
	return "reclaim_type(" + strconv.FormatUint(uint64(t), 10) + ")"
}
