package tripwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/internal/statestore"
)

// RecordKind is the kind of the state store's records of the tripwire: one
// per watched v2 directory, keyed by its path, holding the memory.high it
// had before a Tripwire first wrote it.
var RecordKind = statestore.Kind{Name: "tripwire-memory-high", Version: 1}

// highRecord is the record of one watched v2 directory: the memory.high it
// had before a Tripwire first wrote it. It is put in the store (atomically
// and durably) before that first write and deleted once the original is
// back, so that a Tripwire started after a crash restores the real
// original instead of the threshold the crashed one left there.
type highRecord struct {
	// ID is the directory's inode number (the cgroup id on v2): a
	// record of a removed and re-created cgroup at the same path does
	// not match it.
	ID uint64 `json:"id"`
	// Original is memory.high as it read before the first write: "max"
	// or a number of bytes.
	Original string `json:"original"`
}

// Validate implements statestore.Validator: a record is only ever written
// back to memory.high, so its original must be a value the file takes.
func (r *highRecord) Validate() error {
	if r.ID == 0 {
		return fmt.Errorf("%w: id 0", ErrMalformed)
	}
	if !validHigh(r.Original) {
		return fmt.Errorf("%w: original %q is neither max nor a byte count", ErrMalformed, r.Original)
	}
	return nil
}

// validHigh tells whether v is what memory.high reads: "max" or a decimal
// byte count below 2^63.
func validHigh(v string) bool {
	if v == "max" {
		return true
	}
	_, ok := highBytes(v)
	return ok
}

// highBytes parses a numeric memory.high; ok is false for "max" and
// anything else.
func highBytes(v string) (uint64, bool) {
	if v == "" || v[0] == '+' || len(v) > 1 && v[0] == '0' {
		return 0, false
	}
	n, err := strconv.ParseUint(v, 10, 63)
	return n, err == nil
}

// recordKey is the store key of the record of dir: its cleaned path.
func recordKey(dir string) string { return filepath.Clean(dir) }

// decodeRecord decodes one record file's bytes as the record of key: the
// store's envelope and checksum, then the payload strictly, then
// Validate. It is what reading a record does, without the I/O (and what
// FuzzDecodeRecord drives).
func decodeRecord(b []byte, key string) (highRecord, error) {
	var r highRecord
	rec, err := statestore.Parse(b, RecordKind, key)
	if err != nil {
		return r, err
	}
	if err := statestore.Decode(rec, &r); err != nil {
		return r, fmt.Errorf("%w: %w", statestore.ErrCorrupt, err)
	}
	if err := r.Validate(); err != nil {
		return r, fmt.Errorf("%w: %w", statestore.ErrCorrupt, err)
	}
	return r, nil
}

// legacyRecord is the state file of the Tripwire before the state store
// (Options.LegacyStateDir): one JSON file per watched directory.
type legacyRecord struct {
	Dir      string `json:"dir"`
	ID       uint64 `json:"id"`
	Original string `json:"original"`
}

// legacyPath is where the old state file of dir lived in stateDir: one
// file per watched path, named after it.
func legacyPath(stateDir, dir string) string {
	name := strings.ReplaceAll(strings.Trim(filepath.Clean(dir), "/"), "/", "_")
	return filepath.Join(stateDir, "memory.high."+name+".json")
}

// loadLegacy reads an old state file; ok is false when there is none. One
// that does not parse matches ErrMalformed.
func loadLegacy(path string) (r highRecord, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return r, false, nil
	}
	if err != nil {
		return r, false, fmt.Errorf("read tripwire state %s: %w", path, err)
	}
	var l legacyRecord
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return r, false, fmt.Errorf("parse tripwire state %s: %w: %w", path, ErrMalformed, err)
	}
	r = highRecord{ID: l.ID, Original: l.Original}
	if err := r.Validate(); err != nil {
		return r, false, fmt.Errorf("parse tripwire state %s: %w", path, err)
	}
	return r, true, nil
}

// dirID returns the inode number of the open directory dirfd: the cgroup
// id on cgroup v2.
func dirID(dirfd int, dir string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(dirfd, &st); err != nil {
		return 0, fmt.Errorf("stat %s: %w", dir, err)
	}
	return st.Ino, nil
}
