package cgstat

import (
	"strconv"
)

// The parsers below work on the bytes of one read and allocate nothing
// unless they fail: they run every tick for every pod. The kernel ends every
// line of these files with '\n'; content without one is a short read and is
// malformed.

// ParseUint parses a decimal uint64 made of digits only: no sign, no
// spaces, at most 2^64-1. It is the one number parser of the project's
// kernel-file readers (cgroup files, /proc/vmstat, /proc/meminfo): it takes
// the bytes of a read and allocates nothing, which strconv.ParseUint, taking
// a string, cannot promise.
func ParseUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false // overflow
		}
		v = v*10 + d
	}
	return v, true
}

// malformed returns the error for line n of file name.
func malformed(name string, n int, msg string) error {
	return &ParseError{File: name, Line: n, Msg: msg}
}

// missing returns the error for a required key absent from file name,
// which has n lines: it names the line after the last.
func missing(name string, n int, key string) error {
	return malformed(name, n+1, "no "+strconv.Quote(key)+" line before the end of the file")
}

// kvScanner walks the "key value\n" lines of a flat keyed file
// (memory.stat, memory.events, memory.oom_control).
type kvScanner struct {
	b    []byte
	name string
	line int
	key  []byte
	val  []byte
	err  error
}

// next advances to the next line; it returns false at the end of the
// content or on a malformed line, and then err says which.
func (s *kvScanner) next() bool {
	if s.err != nil || len(s.b) == 0 {
		return false
	}
	s.line++
	end := -1
	sp := -1
	for i, c := range s.b {
		if c == '\n' {
			end = i
			break
		}
		if c == ' ' && sp < 0 {
			sp = i
		}
	}
	if end < 0 {
		s.err = malformed(s.name, s.line, "truncated: no newline at the end of the line")
		return false
	}
	line := s.b[:end]
	s.b = s.b[end+1:]
	if sp <= 0 || sp == len(line)-1 {
		s.err = malformed(s.name, s.line, `want "key value"`)
		return false
	}
	s.key, s.val = line[:sp], line[sp+1:]
	return true
}

// uint parses the current value, recording an error when it is not a
// number.
func (s *kvScanner) uint() uint64 {
	v, ok := ParseUint(s.val)
	if !ok && s.err == nil {
		s.err = malformed(s.name, s.line, "value of "+strconv.Quote(string(s.key))+" is not an unsigned integer: "+strconv.Quote(string(s.val)))
	}
	return v
}

// ParseValue parses a cgroup file holding one unsigned number and its
// newline, as memory.current and memory.usage_in_bytes do. name is the
// file's path, for the error: a *ParseError matching ErrMalformed.
func ParseValue(b []byte, name string) (uint64, error) {
	return parseSingle(b, name, false)
}

// ParseCounter returns the value of key in a flat-keyed cgroup file
// ("key value\n" lines: memory.stat, memory.events, memory.events.local),
// with the scanner the memory.stat parsers use. A missing key or a line
// that does not parse is a *ParseError matching ErrMalformed; name is the
// file's path, for the error.
func ParseCounter(b []byte, key, name string) (uint64, error) {
	s := kvScanner{b: b, name: name}
	for s.next() {
		if string(s.key) == key {
			v := s.uint()
			return v, s.err
		}
	}
	if s.err != nil {
		return 0, s.err
	}
	return 0, missing(name, s.line, key)
}

// parseSingle parses a file holding one number, or "max" when allowMax,
// which gives Unlimited.
func parseSingle(b []byte, name string, allowMax bool) (uint64, error) {
	if len(b) == 0 {
		return 0, malformed(name, 1, "empty")
	}
	if b[len(b)-1] != '\n' {
		return 0, malformed(name, 1, "truncated: no newline at the end of the line")
	}
	v := b[:len(b)-1]
	if allowMax && string(v) == "max" {
		return Unlimited, nil
	}
	n, ok := ParseUint(v)
	if !ok {
		return 0, malformed(name, 1, "not an unsigned integer: "+strconv.Quote(string(v)))
	}
	return n, nil
}

// v1Limit maps a v1 limit in bytes to Unlimited when it is the kernel's
// "no limit".
func v1Limit(v uint64) uint64 {
	if v >= v1UnlimitedFloor {
		return Unlimited
	}
	return v
}

// Bits of the required keys seen by the memory.stat parsers.
const (
	seenAnon = 1 << iota
	seenFile
	seenActiveFile
	seenInactiveFile
	seenAllStat = seenAnon | seenFile | seenActiveFile | seenInactiveFile
)

// requiredStatKeys name the required keys in the order of the seen bits.
var (
	requiredStatKeysV2 = [...]string{"anon", "file", "active_file", "inactive_file"}
	requiredStatKeysV1 = [...]string{"total_rss", "total_cache", "total_active_file", "total_inactive_file"}
)

// optionalStatFields are the Fields that memory.stat parsers set.
const optionalStatFields = FieldShmem | FieldWorkingsetRefaultAnon | FieldWorkingsetRefaultFile |
	FieldWorkingsetActivate | FieldWorkingsetRestore

// parseMemoryStatV2 fills m's memory.stat figures from a cgroup2
// memory.stat. Kernels before 5.9 report workingset_refault, _activate and
// _restore without the _anon/_file split; their refaults were file pages
// only.
func parseMemoryStatV2(b []byte, name string, m *Memory) error {
	return memoryStatV2(b, name, m, seenAllStat)
}

// memoryStatV2 is parseMemoryStatV2 requiring only the keys whose seen
// bits are in need (a figure not required and not seen stays 0, so the
// caller must not use it).
func memoryStatV2(b []byte, name string, m *Memory, need int) error {
	resetStat(m)
	seen := 0
	s := kvScanner{b: b, name: name}
	for s.next() {
		switch string(s.key) {
		case "anon":
			m.Anon, seen = s.uint(), seen|seenAnon
		case "file":
			m.File, seen = s.uint(), seen|seenFile
		case "active_file":
			m.ActiveFile, seen = s.uint(), seen|seenActiveFile
		case "inactive_file":
			m.InactiveFile, seen = s.uint(), seen|seenInactiveFile
		case "shmem":
			m.Shmem = s.uint()
			m.Fields |= FieldShmem
		case "workingset_refault_anon":
			m.WorkingsetRefaultAnon = s.uint()
			m.Fields |= FieldWorkingsetRefaultAnon
		case "workingset_refault_file", "workingset_refault":
			m.WorkingsetRefaultFile += s.uint()
			m.Fields |= FieldWorkingsetRefaultFile
		case "workingset_activate_anon", "workingset_activate_file", "workingset_activate":
			m.WorkingsetActivate += s.uint()
			m.Fields |= FieldWorkingsetActivate
		case "workingset_restore_anon", "workingset_restore_file", "workingset_restore":
			m.WorkingsetRestore += s.uint()
			m.Fields |= FieldWorkingsetRestore
		}
	}
	return s.finish(seen, need, &requiredStatKeysV2)
}

// parseMemoryStatV1 fills m's memory.stat figures from a v1 memory.stat,
// using the hierarchical total_* keys. v1 has no workingset_activate or
// _restore.
func parseMemoryStatV1(b []byte, name string, m *Memory) error {
	return memoryStatV1(b, name, m, seenAllStat)
}

// memoryStatV1 is parseMemoryStatV1 requiring only the keys in need (see
// memoryStatV2).
func memoryStatV1(b []byte, name string, m *Memory, need int) error {
	resetStat(m)
	seen := 0
	s := kvScanner{b: b, name: name}
	for s.next() {
		switch string(s.key) {
		case "total_rss":
			m.Anon, seen = s.uint(), seen|seenAnon
		case "total_cache":
			m.File, seen = s.uint(), seen|seenFile
		case "total_active_file":
			m.ActiveFile, seen = s.uint(), seen|seenActiveFile
		case "total_inactive_file":
			m.InactiveFile, seen = s.uint(), seen|seenInactiveFile
		case "total_shmem":
			m.Shmem = s.uint()
			m.Fields |= FieldShmem
		case "total_workingset_refault_anon":
			m.WorkingsetRefaultAnon = s.uint()
			m.Fields |= FieldWorkingsetRefaultAnon
		case "total_workingset_refault_file":
			m.WorkingsetRefaultFile = s.uint()
			m.Fields |= FieldWorkingsetRefaultFile
		}
	}
	return s.finish(seen, need, &requiredStatKeysV1)
}

// resetStat zeroes what the memory.stat parsers fill in m, so that a
// parse into a used Memory gives what a parse into a new one gives.
func resetStat(m *Memory) {
	m.Anon, m.File, m.ActiveFile, m.InactiveFile, m.Shmem = 0, 0, 0, 0, 0
	m.WorkingsetRefaultAnon, m.WorkingsetRefaultFile, m.WorkingsetActivate, m.WorkingsetRestore = 0, 0, 0, 0
	m.Fields &^= optionalStatFields
}

// finish ends a memory.stat parse: the scanner's error, or the first of
// the keys in need (in the order of the seen bits) that was not seen.
func (s *kvScanner) finish(seen, need int, keys *[4]string) error {
	if s.err != nil {
		return s.err
	}
	if seen&need == need {
		return nil
	}
	for i, k := range keys {
		if need&(1<<i) != 0 && seen&(1<<i) == 0 {
			return missing(s.name, s.line, k)
		}
	}
	return nil
}

// parseMemoryEventsV2 fills m.Events from a cgroup2 memory.events.
func parseMemoryEventsV2(b []byte, name string, m *Memory) error {
	const (
		seenLow = 1 << iota
		seenHigh
		seenMax
		seenOOM
		seenOOMKill
		seenAll = seenLow | seenHigh | seenMax | seenOOM | seenOOMKill
	)
	m.Events = MemoryEvents{}
	m.Fields &^= FieldEventsLow | FieldEventsHigh | FieldEventsOOM | FieldEventsOOMGroupKill
	seen := 0
	s := kvScanner{b: b, name: name}
	for s.next() {
		switch string(s.key) {
		case "low":
			m.Events.Low, seen = s.uint(), seen|seenLow
		case "high":
			m.Events.High, seen = s.uint(), seen|seenHigh
		case "max":
			m.Events.Max, seen = s.uint(), seen|seenMax
		case "oom":
			m.Events.OOM, seen = s.uint(), seen|seenOOM
		case "oom_kill":
			m.Events.OOMKill, seen = s.uint(), seen|seenOOMKill
		case "oom_group_kill":
			m.Events.OOMGroupKill = s.uint()
			m.Fields |= FieldEventsOOMGroupKill
		}
	}
	if s.err != nil {
		return s.err
	}
	if seen != seenAll {
		for i, k := range [...]string{"low", "high", "max", "oom", "oom_kill"} {
			if seen&(1<<i) == 0 {
				return missing(name, s.line, k)
			}
		}
	}
	m.Fields |= FieldEventsLow | FieldEventsHigh | FieldEventsOOM
	return nil
}

// parseOOMControlV1 fills m.Events.OOMKill and m.UnderOOM from a v1
// memory.oom_control.
func parseOOMControlV1(b []byte, name string, m *Memory) error {
	const (
		seenUnder = 1 << iota
		seenKill
	)
	seen := 0
	s := kvScanner{b: b, name: name}
	for s.next() {
		switch string(s.key) {
		case "under_oom":
			v := s.uint()
			if v > 1 && s.err == nil {
				s.err = malformed(name, s.line, "under_oom is neither 0 nor 1")
			}
			m.UnderOOM, seen = v == 1, seen|seenUnder
		case "oom_kill":
			m.Events.OOMKill, seen = s.uint(), seen|seenKill
		}
	}
	if s.err != nil {
		return s.err
	}
	switch {
	case seen&seenUnder == 0:
		return missing(name, s.line, "under_oom")
	case seen&seenKill == 0:
		return missing(name, s.line, "oom_kill")
	}
	m.Fields |= FieldUnderOOM
	return nil
}
