package tripwire

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/nodeguard/nodeguard/internal/statestore"
)

// FuzzDecodeRecord checks the decoding of a tripwire record (the store's
// envelope and checksum, the payload, Validate), without I/O per input: no
// panic; an error is the store's ErrCorrupt or ErrUnsupported (the only
// errors reading a record may quarantine or leave); a record that decodes
// has an id and an original memory.high takes.
func FuzzDecodeRecord(f *testing.F) {
	const key = "/sys/fs/cgroup/kubepods"
	// Seeds: records as the store writes them (made once, here).
	dir := f.TempDir()
	store, err := statestore.Open(dir, statestore.Options{})
	if err != nil {
		f.Fatal(err)
	}
	for _, r := range []highRecord{{ID: 7, Original: "max"}, {ID: 1 << 40, Original: "1073741824"}, {ID: 3, Original: ""}} {
		if err := store.Put(RecordKind, key, r); err != nil {
			f.Fatal(err)
		}
		files, _ := filepath.Glob(filepath.Join(dir, RecordKind.Name, "*.rec"))
		if len(files) != 1 {
			f.Fatalf("record files %v", files)
		}
		b, err := os.ReadFile(files[0])
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"format":1,"kind":"tripwire-memory-high","key":"/sys/fs/cgroup/kubepods","version":2,"crc32c":0,"data":{}}`))
	f.Add([]byte(`{"dir":"/sys/fs/cgroup/kubepods","id":7,"original":"max"}`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRecord(b, key)
		if err != nil {
			if !errors.Is(err, statestore.ErrCorrupt) && !errors.Is(err, statestore.ErrUnsupported) {
				t.Fatalf("decodeRecord: %v: neither corrupt nor unsupported", err)
			}
			return
		}
		if r.ID == 0 || !validHigh(r.Original) {
			t.Fatalf("decoded %+v: not a record to restore from", r)
		}
	})
}
