package nodestats

import (
	"bytes"
	"fmt"
	"math"
)

// VmstatPath is the kernel's system-wide event and state counter file.
const VmstatPath = "/proc/vmstat"

// Vmstat holds the /proc/vmstat event counters nodeguard uses. All are
// monotonic counts since boot (rates come from diffing two reads); a field
// is meaningful only when Has(its key) is true. Names and meanings are
// the kernel's (include/linux/vm_event_item.h, mm/vmstat.c vmstat_text).
type Vmstat struct {
	// OOMKill counts processes killed by the OOM killer, global and
	// memcg alike (oom_kill, Linux 4.13).
	OOMKill uint64
	// PgscanKswapd and PgscanDirect count pages scanned for reclaim by
	// kswapd and by allocating tasks in direct reclaim (pgscan_kswapd,
	// pgscan_direct: per-node counters since Linux 4.8; older kernels
	// write per-zone pgscan_kswapd_<zone>, which are not summed here).
	PgscanKswapd, PgscanDirect uint64
	// PgstealKswapd and PgstealDirect count pages reclaimed, same split
	// (pgsteal_kswapd, pgsteal_direct). steal/scan is reclaim efficiency.
	PgstealKswapd, PgstealDirect uint64
	// PgscanKhugepaged and PgstealKhugepaged count reclaim done by
	// khugepaged (pgscan_khugepaged, pgsteal_khugepaged). OPTIONAL: newer
	// kernels (about 6.0) split them out; before, khugepaged's reclaim
	// was counted in the direct counters.
	PgscanKhugepaged, PgstealKhugepaged uint64
	// WorkingsetRefaultAnon and WorkingsetRefaultFile count refaults of
	// recently evicted anonymous and file pages: thrashing
	// (workingset_refault_anon, workingset_refault_file, Linux 5.9).
	// Older kernels track file pages only, under the name
	// workingset_refault, which fills WorkingsetRefaultFile and leaves
	// WorkingsetRefaultAnon absent.
	WorkingsetRefaultAnon, WorkingsetRefaultFile uint64
	// PgMajFault counts major page faults: faults that waited for I/O
	// (pgmajfault). Required.
	PgMajFault uint64
	// AllocStall counts entries into direct reclaim: the sum of every
	// allocstall_<zone> (allocstall_dma, _dma32, _normal, _movable,
	// _device) on newer kernels, or the single allocstall of older ones.
	AllocStall uint64

	present uint16 // bit k set when VmstatKey k was in the file
}

// VmstatKey names one counter that Vmstat records.
type VmstatKey uint8

// The counters Vmstat records.
const (
	VmstatOOMKill VmstatKey = iota
	VmstatPgscanKswapd
	VmstatPgscanDirect
	VmstatPgstealKswapd
	VmstatPgstealDirect
	VmstatPgscanKhugepaged
	VmstatPgstealKhugepaged
	VmstatWorkingsetRefaultAnon
	VmstatWorkingsetRefaultFile
	VmstatPgMajFault // required
	VmstatAllocStall
	numVmstatKeys
)

// String returns the counter's kernel name; AllocStall, a sum, is
// "allocstall_*".
func (k VmstatKey) String() string {
	switch k {
	case VmstatOOMKill:
		return "oom_kill"
	case VmstatPgscanKswapd:
		return "pgscan_kswapd"
	case VmstatPgscanDirect:
		return "pgscan_direct"
	case VmstatPgstealKswapd:
		return "pgsteal_kswapd"
	case VmstatPgstealDirect:
		return "pgsteal_direct"
	case VmstatPgscanKhugepaged:
		return "pgscan_khugepaged"
	case VmstatPgstealKhugepaged:
		return "pgsteal_khugepaged"
	case VmstatWorkingsetRefaultAnon:
		return "workingset_refault_anon"
	case VmstatWorkingsetRefaultFile:
		return "workingset_refault_file"
	case VmstatPgMajFault:
		return "pgmajfault"
	case VmstatAllocStall:
		return "allocstall_*"
	}
	return fmt.Sprintf("VmstatKey(%d)", uint8(k))
}

// Has reports whether counter k was in the file.
func (v *Vmstat) Has(k VmstatKey) bool { return k < numVmstatKeys && v.present&(1<<k) != 0 }

// Get returns counter k and whether it was in the file.
func (v *Vmstat) Get(k VmstatKey) (uint64, bool) {
	p := v.field(k)
	if p == nil || !v.Has(k) {
		return 0, false
	}
	return *p, true
}

func (v *Vmstat) field(k VmstatKey) *uint64 {
	switch k {
	case VmstatOOMKill:
		return &v.OOMKill
	case VmstatPgscanKswapd:
		return &v.PgscanKswapd
	case VmstatPgscanDirect:
		return &v.PgscanDirect
	case VmstatPgstealKswapd:
		return &v.PgstealKswapd
	case VmstatPgstealDirect:
		return &v.PgstealDirect
	case VmstatPgscanKhugepaged:
		return &v.PgscanKhugepaged
	case VmstatPgstealKhugepaged:
		return &v.PgstealKhugepaged
	case VmstatWorkingsetRefaultAnon:
		return &v.WorkingsetRefaultAnon
	case VmstatWorkingsetRefaultFile:
		return &v.WorkingsetRefaultFile
	case VmstatPgMajFault:
		return &v.PgMajFault
	case VmstatAllocStall:
		return &v.AllocStall
	}
	return nil
}

// vmstatKeyOf maps a counter name to a VmstatKey; the pre-5.9
// workingset_refault maps to VmstatWorkingsetRefaultFile.
func vmstatKeyOf(b []byte) (VmstatKey, bool) {
	switch string(b) {
	case "oom_kill":
		return VmstatOOMKill, true
	case "pgscan_kswapd":
		return VmstatPgscanKswapd, true
	case "pgscan_direct":
		return VmstatPgscanDirect, true
	case "pgsteal_kswapd":
		return VmstatPgstealKswapd, true
	case "pgsteal_direct":
		return VmstatPgstealDirect, true
	case "pgscan_khugepaged":
		return VmstatPgscanKhugepaged, true
	case "pgsteal_khugepaged":
		return VmstatPgstealKhugepaged, true
	case "workingset_refault_anon":
		return VmstatWorkingsetRefaultAnon, true
	case "workingset_refault_file":
		return VmstatWorkingsetRefaultFile, true
	case "workingset_refault":
		return VmstatWorkingsetRefaultFile, true
	case "pgmajfault":
		return VmstatPgMajFault, true
	}
	return 0, false
}

// ReadVmstat reads and parses the vmstat file at path (VmstatPath on a
// live host). To poll, use a VmstatReader, which does not allocate.
func ReadVmstat(path string) (Vmstat, error) {
	b, err := readKernelFile(path)
	if err != nil {
		return Vmstat{}, err
	}
	return ParseVmstat(path, b)
}

// ParseVmstat parses the content b of a vmstat file; name is used only in
// errors. Every line must read "name <unsigned decimal>" with one space,
// as mm/vmstat.c writes it; unknown counters are skipped, a recorded
// counter twice (including workingset_refault beside
// workingset_refault_file) and a missing pgmajfault are errors. It does
// not allocate unless it fails.
func ParseVmstat(name string, b []byte) (Vmstat, error) {
	var v Vmstat
	ls := lines{rest: b}
	for {
		line, ok := ls.next()
		if !ok {
			break
		}
		key, n, ok := splitFlat(line)
		if !ok {
			return Vmstat{}, &ParseError{File: name, Line: ls.n, Msg: "not a \"name value\" line"}
		}
		if bytes.Equal(key, []byte("allocstall")) || bytes.HasPrefix(key, []byte("allocstall_")) {
			if v.AllocStall > math.MaxUint64-n {
				return Vmstat{}, &ParseError{File: name, Line: ls.n, Msg: "allocstall sum overflows 64 bits"}
			}
			v.AllocStall += n
			v.present |= 1 << VmstatAllocStall
			continue
		}
		k, known := vmstatKeyOf(key)
		if !known {
			continue
		}
		if v.present&(1<<k) != 0 {
			return Vmstat{}, &ParseError{File: name, Line: ls.n, Msg: "duplicate counter " + k.String()}
		}
		*v.field(k) = n
		v.present |= 1 << k
	}
	if !v.Has(VmstatPgMajFault) {
		return Vmstat{}, &ParseError{File: name, Msg: "missing required counter pgmajfault"}
	}
	return v, nil
}

// VmstatReader reads one vmstat file repeatedly through a descriptor kept
// open; once warm, Read does not allocate. It is not safe for concurrent
// use.
type VmstatReader struct{ f *statFile }

// OpenVmstat opens the vmstat file at path (VmstatPath on a live host).
func OpenVmstat(path string) (*VmstatReader, error) {
	f, err := openStatFile(path, 8192)
	if err != nil {
		return nil, err
	}
	return &VmstatReader{f: f}, nil
}

// Read reads and parses the file's current content.
func (r *VmstatReader) Read() (Vmstat, error) {
	b, err := r.f.read()
	if err != nil {
		return Vmstat{}, err
	}
	return ParseVmstat(r.f.name, b)
}

// Close closes the file.
func (r *VmstatReader) Close() error { return r.f.close() }
