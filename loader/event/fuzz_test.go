package event

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// FuzzDecode checks that Decode never panics, that it either decodes or
// returns an ErrMalformed error and never both, and that it decodes exactly
// the records that are long enough for a known kind at the right version,
// reporting the kind the header names. The seeds are the golden records and
// testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	for _, tc := range goldenCases(f) {
		f.Add(tc.build.bytes())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := Decode(b)
		if err != nil {
			if ev != nil {
				t.Fatalf("Decode returned %#v with the error %v", ev, err)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not match ErrMalformed", err)
			}
			if wellFormed(b) {
				t.Fatalf("Decode rejected a well-formed record: %v", err)
			}
			return
		}
		if !wellFormed(b) {
			t.Fatalf("Decode accepted a malformed record as %#v", ev)
		}
		h := ev.Hdr()
		if want := Kind(binary.LittleEndian.Uint16(b)); h.Kind != want {
			t.Fatalf("Decode reported kind %v, the record says %v", h.Kind, want)
		}
		if hh, err := DecodeHeader(b); err != nil || hh != *h {
			t.Fatalf("DecodeHeader = %+v, %v; Decode's header %+v", hh, err, *h)
		}
		// The renderings must hold up too, whatever the strings hold.
		_ = Human(ev, "/fuzz")
		if _, err := json.Marshal(ToRecord(ev, time.Unix(0, 0), "")); err != nil {
			t.Fatalf("Marshal: %v", err)
		}
	})
}

// wellFormed is Decode's contract, stated independently: long enough for a
// header, of a known kind, at version 1, and at least as long as the kind's
// record.
func wellFormed(b []byte) bool {
	if len(b) < 40 {
		return false
	}
	sizes := map[uint16]int{1: 104, 2: 72, 3: 320, 4: 320, 5: 64, 6: 64, 7: 56}
	size, ok := sizes[binary.LittleEndian.Uint16(b)]
	return ok && b[2] == 1 && len(b) >= size
}
