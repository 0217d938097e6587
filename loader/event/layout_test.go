package event

import (
	"fmt"
	"sort"
	"strings"
	"testing"
)

// layout_test.go lays records out by hand, byte by byte at explicit offsets,
// the way the C compiler lays out the structs of nodeguard.h. It shares no
// code with the decoder (no encoding/binary), so a wrong offset in either one
// shows up as a mismatch.

// span is one field of a hand-built record.
type span struct {
	off  int
	name string
	b    []byte
}

// builder collects the fields of one record of a given size.
type builder struct {
	t     testing.TB
	size  int
	title string
	spans []span
}

func newBuilder(t testing.TB, size int, title string) *builder {
	return &builder{t: t, size: size, title: title}
}

func (l *builder) put(off int, name string, b []byte) *builder {
	l.spans = append(l.spans, span{off: off, name: name, b: b})
	return l
}

// leBytes returns the n low bytes of v, least significant first.
func leBytes(v uint64, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
	return b
}

func (l *builder) u8(off int, name string, v uint8) *builder { return l.put(off, name, []byte{v}) }
func (l *builder) u16(off int, name string, v uint16) *builder {
	return l.put(off, name, leBytes(uint64(v), 2))
}
func (l *builder) u32(off int, name string, v uint32) *builder {
	return l.put(off, name, leBytes(uint64(v), 4))
}
func (l *builder) s32(off int, name string, v int32) *builder {
	return l.put(off, name, leBytes(uint64(uint32(v)), 4))
}
func (l *builder) u64(off int, name string, v uint64) *builder {
	return l.put(off, name, leBytes(v, 8))
}

// str puts s into a buffer of n bytes, NUL-padded. s may fill the buffer
// (no NUL) but not overflow it.
func (l *builder) str(off, n int, name, s string) *builder {
	if len(s) > n {
		l.t.Fatalf("%s: %q does not fit %d bytes", name, s, n)
	}
	b := make([]byte, n)
	copy(b, s)
	return l.put(off, name, b)
}

// header lays out struct ng_header at offset 0.
func (l *builder) header(h Header) *builder {
	return l.
		u16(0, "hdr.kind", uint16(h.Kind)).
		u8(2, "hdr.version", h.Version).
		u8(3, "hdr.flags", uint8(h.Flags)).
		u32(4, "hdr.cpu", h.CPU).
		u32(8, "hdr.pid", h.PID).
		u32(12, "hdr.tid", h.TID).
		u64(16, "hdr.ts_ns", h.TimestampNS).
		u64(24, "hdr.memcg_id", h.MemcgID).
		u64(32, "hdr.cgroup_id", h.CgroupID)
}

// sorted returns the spans by offset, failing the test when they overlap,
// leave a gap or do not end exactly at the record's size: every byte of the
// struct must be accounted for, padding included.
func (l *builder) sorted() []span {
	l.t.Helper()
	s := append([]span(nil), l.spans...)
	sort.Slice(s, func(i, j int) bool { return s[i].off < s[j].off })
	next := 0
	for _, f := range s {
		if f.off != next {
			l.t.Fatalf("%s: field %s at offset %d, want %d (gap or overlap)", l.title, f.name, f.off, next)
		}
		next = f.off + len(f.b)
	}
	if next != l.size {
		l.t.Fatalf("%s: fields end at %d, want size %d", l.title, next, l.size)
	}
	return s
}

// bytes returns the record.
func (l *builder) bytes() []byte {
	l.t.Helper()
	out := make([]byte, 0, l.size)
	for _, f := range l.sorted() {
		out = append(out, f.b...)
	}
	return out
}

// golden returns the record as annotated hex, one field per line:
//
//	# title
//	01 00  # 0 hdr.kind
//
// Strings longer than 16 bytes are wrapped at 16 bytes a line.
func (l *builder) golden() string {
	l.t.Helper()
	var sb strings.Builder
	fmt.Fprintf(&sb, "# %s\n", l.title)
	for _, f := range l.sorted() {
		for i := 0; i < len(f.b); i += 16 {
			chunk := f.b[i:min(i+16, len(f.b))]
			hx := make([]string, len(chunk))
			for j, c := range chunk {
				hx[j] = fmt.Sprintf("%02x", c)
			}
			note := fmt.Sprintf("%d %s", f.off+i, f.name)
			if i > 0 {
				note = fmt.Sprintf("%d %s+%d", f.off+i, f.name, i)
			}
			fmt.Fprintf(&sb, "%-48s # %s\n", strings.Join(hx, " "), note)
		}
	}
	return sb.String()
}

// parseGolden reads the format of golden: hex bytes separated by spaces, with
// '#' starting a comment.
func parseGolden(text string) ([]byte, error) {
	var out []byte
	for n, line := range strings.Split(text, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		for _, w := range strings.Fields(line) {
			var c byte
			if _, err := fmt.Sscanf(w, "%02x", &c); err != nil || len(w) != 2 {
				return nil, fmt.Errorf("line %d: bad byte %q", n+1, w)
			}
			out = append(out, c)
		}
	}
	return out, nil
}
