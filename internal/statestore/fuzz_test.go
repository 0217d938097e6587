package statestore

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// FuzzParse holds the envelope to what reading back after any crash
// needs. Whatever the bytes, Parse never panics and either returns a
// record of the kind's key, of a version it reads, or an error that is
// ErrCorrupt (quarantined) or ErrUnsupported (left in place), never both
// nor neither. And for any key Put accepts and any payload, the file Put
// writes (encode: the same bytes, without the disk) parses back to the
// key, version, time and payload written, and the key survives its file
// name. Payloads that are JSON are stored as they are, others as a JSON
// string.
func FuzzParse(f *testing.F) {
	k := Kind{Name: "fuzz-kind", Version: 2}
	now := time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)
	good, err := encode(k, "default/web", map[string]any{"uid": "1234", "n": 1}, now)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, "default/web", []byte(`{"uid":"1234","n":1}`))
	f.Add([]byte(`{"format":1,"kind":"fuzz-kind","key":"k","version":3,"written":"2025-03-01T12:00:00Z","crc32c":0,"data":{}}`), "k", []byte(`[]`))
	f.Add([]byte(`{"format":2}`), "../x", []byte("not json <&>"))
	f.Add(good[:len(good)/2], ".", []byte(`"\u2028"`))
	f.Add(append(bytes.Clone(good), good...), "%2E%2e", []byte{0xff, '"'})
	f.Fuzz(func(t *testing.T, b []byte, key string, payload []byte) {
		r, err := Parse(b, k, key)
		corrupt, unsupported := errors.Is(err, ErrCorrupt), errors.Is(err, ErrUnsupported)
		switch {
		case err != nil && corrupt == unsupported:
			t.Fatalf("error is corrupt %v, unsupported %v: %v", corrupt, unsupported, err)
		case err == nil && (r.Key != key || r.Version < 1 || r.Version > k.Version || len(r.Data) == 0):
			t.Fatalf("record %+v read as %q of version up to %d", r, key, k.Version)
		}

		name, err := fileName(key)
		if err != nil {
			return // Put refuses the key
		}
		if strings.HasPrefix(name, hashedPrefix) {
			// Too long to escape: the key is read from the envelope
			// (TestKeysTooLongForAFileNameAreNamedByTheirHash).
			if len(name) != len(hashedPrefix)+64+len(suffix) {
				t.Fatalf("key %q hashed to %q", key, name)
			}
		} else if back, ok := keyOf(name); !ok || back != key {
			t.Fatalf("key %q is stored as %q, which lists as %q (%v)", key, name, back, ok)
		}
		var v any = string(payload)
		if json.Valid(payload) {
			v = json.RawMessage(payload)
		}
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		enc, err := encode(k, key, v, now)
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		r, err = Parse(enc, k, key)
		switch {
		case err != nil:
			t.Fatalf("the record Put writes for %q does not parse: %v\n%s", key, err, enc)
		case r.Key != key || r.Version != k.Version || !r.Written.Equal(now) || !bytes.Equal(r.Data, want):
			t.Fatalf("record read back as %q v%d %v %s, written %q v%d %v %s", r.Key, r.Version, r.Written, r.Data, key, k.Version, now, want)
		}
	})
}
