package nodestats

import (
	"bytes"
	"fmt"
	"math"

	"github.com/nodeguard/nodeguard/cgroups/cgstat"
)

// MeminfoPath is the kernel's system-wide memory report.
const MeminfoPath = "/proc/meminfo"

// Meminfo holds the /proc/meminfo values nodeguard uses, in BYTES (the
// kernel writes kB, meaning KiB). A field is meaningful only when
// Has(its key) is true; required keys are always present in a Meminfo
// returned without error.
//
// Definitions are the kernel's (Documentation/filesystems/proc.rst,
// fs/proc/meminfo.c).
type Meminfo struct {
	MemTotal     uint64 // MemTotal: usable RAM; cAdvisor's machine memory capacity, the node's memory.available capacity
	MemFree      uint64 // MemFree: pages on the free lists
	MemAvailable uint64 // MemAvailable: the kernel's estimate of memory available without swapping (Linux 3.14)
	Buffers      uint64 // Buffers: block device page cache
	Cached       uint64 // Cached: file page cache, less Buffers and SwapCached
	SwapCached   uint64 // SwapCached: pages in both swap and RAM
	Active       uint64 // Active: ActiveAnon + ActiveFile
	Inactive     uint64 // Inactive: InactiveAnon + InactiveFile
	ActiveAnon   uint64 // Active(anon)
	InactiveAnon uint64 // Inactive(anon)
	ActiveFile   uint64 // Active(file)
	InactiveFile uint64 // Inactive(file)
	Unevictable  uint64 // Unevictable: mlocked, ramfs, SHM_LOCK pages
	Mlocked      uint64 // Mlocked
	SwapTotal    uint64 // SwapTotal
	SwapFree     uint64 // SwapFree
	Dirty        uint64 // Dirty: waiting to be written back
	Writeback    uint64 // Writeback: being written back
	AnonPages    uint64 // AnonPages: anonymous pages mapped into user page tables
	Mapped       uint64 // Mapped: files mapped into user page tables
	Shmem        uint64 // Shmem: shmem and tmpfs, counted inside Cached
	KReclaimable uint64 // KReclaimable: SReclaimable plus other reclaimable kernel memory (Linux 4.20)
	Slab         uint64 // Slab: SReclaimable + SUnreclaim
	SReclaimable uint64 // SReclaimable
	SUnreclaim   uint64 // SUnreclaim

	present uint32 // bit k set when MeminfoKey k was in the file
}

// MeminfoKey names one /proc/meminfo key that Meminfo records.
type MeminfoKey uint8

// The keys Meminfo records. Keys marked required make a file without them
// malformed.
const (
	MeminfoMemTotal     MeminfoKey = iota // required
	MeminfoMemFree                        // required
	MeminfoMemAvailable                   // Linux 3.14
	MeminfoBuffers
	MeminfoCached
	MeminfoSwapCached
	MeminfoActive
	MeminfoInactive
	MeminfoActiveAnon
	MeminfoInactiveAnon
	MeminfoActiveFile   // required
	MeminfoInactiveFile // required
	MeminfoUnevictable
	MeminfoMlocked
	MeminfoSwapTotal
	MeminfoSwapFree
	MeminfoDirty
	MeminfoWriteback
	MeminfoAnonPages
	MeminfoMapped
	MeminfoShmem
	MeminfoKReclaimable // Linux 4.20
	MeminfoSlab
	MeminfoSReclaimable
	MeminfoSUnreclaim
	numMeminfoKeys
)

// requiredMeminfo are the keys whose absence makes a file malformed: every
// kernel nodeguard supports writes them, and the node signals need them.
const requiredMeminfo = 1<<MeminfoMemTotal | 1<<MeminfoMemFree | 1<<MeminfoActiveFile | 1<<MeminfoInactiveFile

// String returns the key as the kernel spells it, e.g. "Active(file)".
func (k MeminfoKey) String() string {
	switch k {
	case MeminfoMemTotal:
		return "MemTotal"
	case MeminfoMemFree:
		return "MemFree"
	case MeminfoMemAvailable:
		return "MemAvailable"
	case MeminfoBuffers:
		return "Buffers"
	case MeminfoCached:
		return "Cached"
	case MeminfoSwapCached:
		return "SwapCached"
	case MeminfoActive:
		return "Active"
	case MeminfoInactive:
		return "Inactive"
	case MeminfoActiveAnon:
		return "Active(anon)"
	case MeminfoInactiveAnon:
		return "Inactive(anon)"
	case MeminfoActiveFile:
		return "Active(file)"
	case MeminfoInactiveFile:
		return "Inactive(file)"
	case MeminfoUnevictable:
		return "Unevictable"
	case MeminfoMlocked:
		return "Mlocked"
	case MeminfoSwapTotal:
		return "SwapTotal"
	case MeminfoSwapFree:
		return "SwapFree"
	case MeminfoDirty:
		return "Dirty"
	case MeminfoWriteback:
		return "Writeback"
	case MeminfoAnonPages:
		return "AnonPages"
	case MeminfoMapped:
		return "Mapped"
	case MeminfoShmem:
		return "Shmem"
	case MeminfoKReclaimable:
		return "KReclaimable"
	case MeminfoSlab:
		return "Slab"
	case MeminfoSReclaimable:
		return "SReclaimable"
	case MeminfoSUnreclaim:
		return "SUnreclaim"
	}
	return fmt.Sprintf("MeminfoKey(%d)", uint8(k))
}

// Has reports whether key k was in the file.
func (m *Meminfo) Has(k MeminfoKey) bool { return k < numMeminfoKeys && m.present&(1<<k) != 0 }

// Get returns the value of key k in bytes, and whether it was in the file.
func (m *Meminfo) Get(k MeminfoKey) (uint64, bool) {
	p := m.field(k)
	if p == nil || !m.Has(k) {
		return 0, false
	}
	return *p, true
}

// field returns the address of the field that holds key k, or nil.
func (m *Meminfo) field(k MeminfoKey) *uint64 {
	switch k {
	case MeminfoMemTotal:
		return &m.MemTotal
	case MeminfoMemFree:
		return &m.MemFree
	case MeminfoMemAvailable:
		return &m.MemAvailable
	case MeminfoBuffers:
		return &m.Buffers
	case MeminfoCached:
		return &m.Cached
	case MeminfoSwapCached:
		return &m.SwapCached
	case MeminfoActive:
		return &m.Active
	case MeminfoInactive:
		return &m.Inactive
	case MeminfoActiveAnon:
		return &m.ActiveAnon
	case MeminfoInactiveAnon:
		return &m.InactiveAnon
	case MeminfoActiveFile:
		return &m.ActiveFile
	case MeminfoInactiveFile:
		return &m.InactiveFile
	case MeminfoUnevictable:
		return &m.Unevictable
	case MeminfoMlocked:
		return &m.Mlocked
	case MeminfoSwapTotal:
		return &m.SwapTotal
	case MeminfoSwapFree:
		return &m.SwapFree
	case MeminfoDirty:
		return &m.Dirty
	case MeminfoWriteback:
		return &m.Writeback
	case MeminfoAnonPages:
		return &m.AnonPages
	case MeminfoMapped:
		return &m.Mapped
	case MeminfoShmem:
		return &m.Shmem
	case MeminfoKReclaimable:
		return &m.KReclaimable
	case MeminfoSlab:
		return &m.Slab
	case MeminfoSReclaimable:
		return &m.SReclaimable
	case MeminfoSUnreclaim:
		return &m.SUnreclaim
	}
	return nil
}

// meminfoKeyOf maps a key as the kernel spells it to a MeminfoKey. The
// switch on string(b) does not allocate.
func meminfoKeyOf(b []byte) (MeminfoKey, bool) {
	switch string(b) {
	case "MemTotal":
		return MeminfoMemTotal, true
	case "MemFree":
		return MeminfoMemFree, true
	case "MemAvailable":
		return MeminfoMemAvailable, true
	case "Buffers":
		return MeminfoBuffers, true
	case "Cached":
		return MeminfoCached, true
	case "SwapCached":
		return MeminfoSwapCached, true
	case "Active":
		return MeminfoActive, true
	case "Inactive":
		return MeminfoInactive, true
	case "Active(anon)":
		return MeminfoActiveAnon, true
	case "Inactive(anon)":
		return MeminfoInactiveAnon, true
	case "Active(file)":
		return MeminfoActiveFile, true
	case "Inactive(file)":
		return MeminfoInactiveFile, true
	case "Unevictable":
		return MeminfoUnevictable, true
	case "Mlocked":
		return MeminfoMlocked, true
	case "SwapTotal":
		return MeminfoSwapTotal, true
	case "SwapFree":
		return MeminfoSwapFree, true
	case "Dirty":
		return MeminfoDirty, true
	case "Writeback":
		return MeminfoWriteback, true
	case "AnonPages":
		return MeminfoAnonPages, true
	case "Mapped":
		return MeminfoMapped, true
	case "Shmem":
		return MeminfoShmem, true
	case "KReclaimable":
		return MeminfoKReclaimable, true
	case "Slab":
		return MeminfoSlab, true
	case "SReclaimable":
		return MeminfoSReclaimable, true
	case "SUnreclaim":
		return MeminfoSUnreclaim, true
	}
	return 0, false
}

// ReadMeminfo reads and parses the meminfo file at path (MeminfoPath on a
// live host). To poll, use a MeminfoReader, which does not allocate.
func ReadMeminfo(path string) (Meminfo, error) {
	b, err := readKernelFile(path)
	if err != nil {
		return Meminfo{}, err
	}
	return ParseMeminfo(path, b)
}

// ParseMeminfo parses the content b of a meminfo file; name is used only in
// errors. Every line must read "Key: <decimal>" optionally followed by
// " kB", as fs/proc/meminfo.c writes it; unknown keys are skipped, a
// known key twice, a recorded key without its kB unit, a value that
// overflows 64 bits in bytes, and a missing required key are errors. It
// does not allocate unless it fails.
func ParseMeminfo(name string, b []byte) (Meminfo, error) {
	var m Meminfo
	ls := lines{rest: b}
	for {
		line, ok := ls.next()
		if !ok {
			break
		}
		key, v, kB, msg := splitMeminfoLine(line)
		if msg != "" {
			return Meminfo{}, &ParseError{File: name, Line: ls.n, Msg: msg}
		}
		k, known := meminfoKeyOf(key)
		if !known {
			continue
		}
		if m.present&(1<<k) != 0 {
			return Meminfo{}, &ParseError{File: name, Line: ls.n, Msg: "duplicate key " + k.String()}
		}
		if !kB {
			return Meminfo{}, &ParseError{File: name, Line: ls.n, Msg: k.String() + " has no kB unit"}
		}
		if v > math.MaxUint64/1024 {
			return Meminfo{}, &ParseError{File: name, Line: ls.n, Msg: k.String() + " overflows 64 bits in bytes"}
		}
		*m.field(k) = v * 1024
		m.present |= 1 << k
	}
	if missing := requiredMeminfo &^ m.present; missing != 0 {
		for k := range numMeminfoKeys {
			if missing&(1<<k) != 0 {
				return Meminfo{}, &ParseError{File: name, Msg: "missing required key " + k.String()}
			}
		}
	}
	return m, nil
}

// splitMeminfoLine splits "Key:   123 kB" into its key, value and whether
// the kB unit was there. msg is non-empty when the line is malformed.
func splitMeminfoLine(line []byte) (key []byte, v uint64, kB bool, msg string) {
	colon := bytes.IndexByte(line, ':')
	if colon <= 0 {
		return nil, 0, false, "no key before a colon"
	}
	key = line[:colon]
	if bytes.IndexByte(key, ' ') >= 0 {
		return nil, 0, false, "space in key"
	}
	rest := line[colon+1:]
	i := 0
	for i < len(rest) && rest[i] == ' ' {
		i++
	}
	if i == 0 {
		return nil, 0, false, "no space after the colon"
	}
	rest = rest[i:]
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	v, ok := cgstat.ParseUint(rest[:j])
	if !ok {
		return nil, 0, false, "value is not an unsigned decimal number"
	}
	switch unit := rest[j:]; string(unit) {
	case "":
		return key, v, false, ""
	case " kB":
		return key, v, true, ""
	}
	return nil, 0, false, "unexpected text after the value"
}

// MeminfoReader reads one meminfo file repeatedly through a descriptor kept
// open; once warm, Read does not allocate. It is not safe for concurrent
// use.
type MeminfoReader struct{ f *statFile }

// OpenMeminfo opens the meminfo file at path (MeminfoPath on a live host).
func OpenMeminfo(path string) (*MeminfoReader, error) {
	f, err := openStatFile(path, 4096)
	if err != nil {
		return nil, err
	}
	return &MeminfoReader{f: f}, nil
}

// Read reads and parses the file's current content.
func (r *MeminfoReader) Read() (Meminfo, error) {
	b, err := r.f.read()
	if err != nil {
		return Meminfo{}, err
	}
	return ParseMeminfo(r.f.name, b)
}

// Close closes the file.
func (r *MeminfoReader) Close() error { return r.f.close() }
