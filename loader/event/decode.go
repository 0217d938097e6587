package event

import (
	"bytes"
	"encoding/binary"
)

// DecodeHeader decodes the 40-byte header at the start of b. It checks only
// that b is long enough (*ShortError with Kind 0 otherwise), not the kind or
// the version.
func DecodeHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, &ShortError{Need: HeaderSize, Got: len(b)}
	}
	return header(b), nil
}

// header decodes the header; len(b) >= HeaderSize.
func header(b []byte) Header {
	_ = b[HeaderSize-1]
	le := binary.LittleEndian
	return Header{
		Kind:        Kind(le.Uint16(b[0:])),
		Version:     b[2],
		Flags:       Flags(b[3]),
		CPU:         le.Uint32(b[4:]),
		PID:         le.Uint32(b[8:]),
		TID:         le.Uint32(b[12:]),
		TimestampNS: le.Uint64(b[16:]),
		MemcgID:     le.Uint64(b[24:]),
		CgroupID:    le.Uint64(b[32:]),
	}
}

// Decode decodes one ring buffer record. It checks, in this order, that the
// header is complete (*ShortError), that the kind is known
// (*UnknownKindError), that the version is the one this package decodes
// (*VersionError) and that the record is at least as long as the kind's
// layout (*ShortError). Bytes after the layout are ignored. The result is one
// of *OOMKill, *Reclaim, *Cgroup, *OOMScoreAdj, *Exit and *Bench, and does not
// refer to b.
func Decode(b []byte) (Event, error) {
	if len(b) < HeaderSize {
		return nil, &ShortError{Need: HeaderSize, Got: len(b)}
	}
	h := header(b)
	want, size, ok := layout(h.Kind)
	if !ok {
		return nil, &UnknownKindError{Kind: h.Kind}
	}
	if h.Version != want {
		return nil, &VersionError{Kind: h.Kind, Got: h.Version, Want: want}
	}
	if len(b) < size {
		return nil, &ShortError{Kind: h.Kind, Need: size, Got: len(b)}
	}
	switch h.Kind {
	case KindOOMKill:
		return decodeOOMKill(h, b[:sizeOOMKill]), nil
	case KindReclaim:
		return decodeReclaim(h, b[:sizeReclaim]), nil
	case KindCgroupMkdir, KindCgroupRmdir:
		return decodeCgroup(h, b[:sizeCgroup]), nil
	case KindOOMScoreAdj:
		return decodeOOMScoreAdj(h, b[:sizeOOMScoreAdj]), nil
	case KindExit:
		return decodeExit(h, b[:sizeExit]), nil
	case KindBench:
		return decodeBench(h, b[:sizeBench]), nil
	}
	// Unreachable while layout and this switch list the same kinds; an error
	// rather than a panic if they ever drift apart.
	return nil, &UnknownKindError{Kind: h.Kind}
}

// The decoders below take b of exactly the kind's size; each reads its
// fields at the offsets of the C struct.

func decodeOOMKill(h Header, b []byte) *OOMKill {
	_ = b[sizeOOMKill-1]
	le := binary.LittleEndian
	return &OOMKill{
		Header:         h,
		Comm:           cString(b[40 : 40+commLen]),
		OOMScoreAdj:    int32(le.Uint32(b[56:])),
		TriggerPID:     le.Uint32(b[60:]),
		TotalVMPages:   le.Uint64(b[64:]),
		AnonRSSPages:   le.Uint64(b[72:]),
		FileRSSPages:   le.Uint64(b[80:]),
		ShmemRSSPages:  le.Uint64(b[88:]),
		MemcgLevel:     le.Uint32(b[96:]),
		MemcgHierarchy: le.Uint32(b[100:]),
	}
}

func decodeReclaim(h Header, b []byte) *Reclaim {
	_ = b[sizeReclaim-1]
	le := binary.LittleEndian
	return &Reclaim{
		Header:      h,
		Type:        ReclaimType(le.Uint32(b[40:])),
		Order:       int32(le.Uint32(b[44:])),
		GFPFlags:    le.Uint32(b[48:]),
		NID:         le.Uint32(b[52:]),
		DurationNS:  le.Uint64(b[56:]),
		NrReclaimed: le.Uint64(b[64:]),
	}
}

func decodeCgroup(h Header, b []byte) *Cgroup {
	_ = b[sizeCgroup-1]
	le := binary.LittleEndian
	return &Cgroup{
		Header:      h,
		ID:          le.Uint64(b[40:]),
		ParentID:    le.Uint64(b[48:]),
		HierarchyID: le.Uint32(b[56:]),
		Level:       le.Uint32(b[60:]),
		Path:        cString(b[64 : 64+pathLen]),
	}
}

func decodeOOMScoreAdj(h Header, b []byte) *OOMScoreAdj {
	_ = b[sizeOOMScoreAdj-1]
	le := binary.LittleEndian
	return &OOMScoreAdj{
		Header:      h,
		Comm:        cString(b[40 : 40+commLen]),
		OOMScoreAdj: int32(le.Uint32(b[56:])),
		WriterPID:   le.Uint32(b[60:]),
	}
}

func decodeExit(h Header, b []byte) *Exit {
	_ = b[sizeExit-1]
	le := binary.LittleEndian
	return &Exit{
		Header:   h,
		Comm:     cString(b[40 : 40+commLen]),
		ExitCode: le.Uint32(b[56:]),
		// b[60:64] is _pad.
	}
}

func decodeBench(h Header, b []byte) *Bench {
	_ = b[sizeBench-1]
	le := binary.LittleEndian
	return &Bench{
		Header: h,
		Seq:    le.Uint64(b[40:]),
		Batch:  le.Uint64(b[48:]),
	}
}

// cString returns the C string in the fixed buffer b: up to its first NUL, or
// all of b when it has none.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
