package tripwire

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/internal/statestore"
)

// openStore opens the state store at dir, as the agent does.
func openStore(t *testing.T, dir string) *statestore.Store {
	t.Helper()
	s, err := statestore.Open(dir, statestore.Options{Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// inode is the inode number of dir: the id its record names.
func inode(t *testing.T, dir string) uint64 {
	t.Helper()
	fd, err := openDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	id, err := dirID(fd, dir)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// crashed leaves dir as a Tripwire that armed and never closed leaves it:
// the record of the original in the store and the threshold in
// memory.high.
func crashed(t *testing.T, dir string, store *statestore.Store, original, armed string) {
	t.Helper()
	if err := store.Put(RecordKind, recordKey(dir), highRecord{ID: inode(t, dir), Original: original}); err != nil {
		t.Fatal(err)
	}
	writeFake(t, dir, fileHigh, armed+"\n")
}

// recordOf reads the record of dir back.
func recordOf(t *testing.T, store *statestore.Store, dir string) (highRecord, bool) {
	t.Helper()
	r, ok, err := statestore.GetOf[highRecord](store, RecordKind, recordKey(dir))
	if err != nil {
		t.Fatalf("read the record of %s: %v", dir, err)
	}
	return r, ok
}

// noRecords checks that the store holds no tripwire record.
func noRecords(t *testing.T, store *statestore.Store) {
	t.Helper()
	recs, err := store.List(RecordKind)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 0 {
		t.Errorf("tripwire records left in the store: %d (first %s)", len(recs), recs[0].Key)
	}
}

// putRaw writes b as the record file of dir, as a torn or foreign write
// would leave it.
func putRaw(t *testing.T, store *statestore.Store, dir string, b []byte) {
	t.Helper()
	if err := store.Put(RecordKind, recordKey(dir), highRecord{ID: 1, Original: "max"}); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(store.Dir(), RecordKind.Name, "*.rec"))
	if err != nil || len(files) != 1 {
		t.Fatalf("record files %v, %v", files, err)
	}
	if err := os.WriteFile(files[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// high reads memory.high of a fake directory as the kernel shows it.
func high(t *testing.T, dir string) string {
	t.Helper()
	return strings.TrimSpace(readFake(t, dir, fileHigh))
}

func TestV2RecordsTheOriginalBeforeTheFirstWrite(t *testing.T) {
	dir := fakeV2(t, "1073741824", 0)
	store := openStore(t, t.TempDir())
	tw := mustNew(t, dir, true, Options{Mechanism: KindMemoryHigh, Store: store})
	if _, ok := recordOf(t, store, dir); ok {
		t.Fatal("a record before any Arm")
	}
	if err := tw.Arm(64 << 20); err != nil {
		t.Fatal(err)
	}
	r, ok := recordOf(t, store, dir)
	if !ok || r.Original != "1073741824" || r.ID != inode(t, dir) {
		t.Fatalf("record %+v, %v; want the original 1073741824 of %s", r, ok, dir)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if got := high(t, dir); got != "1073741824" {
		t.Errorf("memory.high = %q after Close, want the original", got)
	}
	noRecords(t, store)
}

func TestV2AfterACrash(t *testing.T) {
	for _, mech := range []struct {
		name string
		opts Options
	}{
		{"memory.high", Options{Mechanism: KindMemoryHigh}},
		{"working set with the assist", Options{}},
		{"working set without the assist", Options{NoAssist: true}},
	} {
		t.Run(mech.name, func(t *testing.T) {
			t.Run("a new Tripwire puts the recorded original back at New and deletes the record", func(t *testing.T) {
				dir := fakeV2(t, "max", 0)
				store := openStore(t, t.TempDir())
				crashed(t, dir, store, "max", "67108864")
				opts := mech.opts
				opts.Store = store
				tw := mustNew(t, dir, true, opts)
				if got := high(t, dir); got != "max" {
					t.Errorf("memory.high = %q after New, want the recorded original max", got)
				}
				noRecords(t, store)
				if err := tw.Close(); err != nil {
					t.Fatal(err)
				}
				if got := high(t, dir); got != "max" {
					t.Errorf("memory.high = %q after Close, want max", got)
				}
			})
			t.Run("a record of another cgroup at the same path is deleted, not used", func(t *testing.T) {
				dir := fakeV2(t, "1073741824", 0)
				store := openStore(t, t.TempDir())
				if err := store.Put(RecordKind, recordKey(dir), highRecord{ID: 1, Original: "max"}); err != nil {
					t.Fatal(err)
				}
				opts := mech.opts
				opts.Store = store
				tw := mustNew(t, dir, true, opts)
				if got := high(t, dir); got != "1073741824" {
					t.Errorf("memory.high = %q after New, want this cgroup's own 1073741824", got)
				}
				if err := tw.Close(); err != nil {
					t.Fatal(err)
				}
				if got := high(t, dir); got != "1073741824" {
					t.Errorf("memory.high = %q after Close, want this cgroup's own 1073741824", got)
				}
				noRecords(t, store)
			})
		})
	}
	t.Run("a new Tripwire that arms again restores the recorded original, not the crashed one's threshold", func(t *testing.T) {
		dir := fakeV2(t, "max", 0)
		store := openStore(t, t.TempDir())
		crashed(t, dir, store, "max", "67108864")
		tw := mustNew(t, dir, true, Options{Mechanism: KindMemoryHigh, Store: store})
		if err := tw.Arm(32 << 20); err != nil {
			t.Fatal(err)
		}
		if r, ok := recordOf(t, store, dir); !ok || r.Original != "max" {
			t.Errorf("record %+v, %v while armed, want the original max", r, ok)
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		if got := high(t, dir); got != "max" {
			t.Errorf("memory.high = %q after Close, want max", got)
		}
		noRecords(t, store)
	})
}

// writtenRange is the HighRange of the repair tests: 64 MiB to 2 GiB.
var writtenRange = HighRange{Min: 64 << 20, Max: 2 << 30}

func TestAnUnreadableRecordIsQuarantinedAndMemoryHighRepaired(t *testing.T) {
	garbage := []byte("{\"format\":1,\"kind\":\"tripwire-memory-high\",\"key\":") // torn
	tests := []struct {
		name    string
		found   string
		unarmed string
		want    string
	}{
		{"a value the tripwire writes goes back to max", "67108864", "", "max"},
		{"a value the tripwire writes goes back to the configured value", "100663296", "3221225472", "3221225472"},
		{"a value below the range is left alone", "1048576", "", "1048576"},
		{"a value above the range is left alone", "4294967296", "", "4294967296"},
		{"max while the configured value is a number is left alone", "max", "3221225472", "max"},
		{"the value without an agent stays", "max", "", "max"},
	}
	mechs := []struct {
		name string
		opts Options
	}{
		{"memory.high", Options{Mechanism: KindMemoryHigh}},
		{"working set with the assist", Options{}},
		{"working set without the assist", Options{NoAssist: true}},
	}
	for _, mech := range mechs {
		for _, tt := range tests {
			for _, bad := range []struct {
				name  string
				write func(t *testing.T, store *statestore.Store, dir string)
			}{
				{"torn envelope", func(t *testing.T, store *statestore.Store, dir string) { putRaw(t, store, dir, garbage) }},
				{"payload that does not validate", func(t *testing.T, store *statestore.Store, dir string) {
					if err := store.Put(RecordKind, recordKey(dir), highRecord{ID: inode(t, dir), Original: "lots"}); err != nil {
						t.Fatal(err)
					}
				}},
			} {
				t.Run(mech.name+": "+bad.name+": "+tt.name, func(t *testing.T) {
					dir := fakeV2(t, tt.found, 0)
					store := openStore(t, t.TempDir())
					bad.write(t, store, dir)
					opts := mech.opts
					opts.Store, opts.Unarmed, opts.Written = store, tt.unarmed, writtenRange
					tw, err := New(dir, true, opts)
					if err != nil {
						t.Fatalf("New = %v, want a Tripwire despite the bad record", err)
					}
					t.Cleanup(func() { tw.Close() })
					if got := high(t, dir); got != tt.want {
						t.Errorf("memory.high = %q after New, want %q", got, tt.want)
					}
					if n := store.Quarantined(RecordKind.Name); n != 1 {
						t.Errorf("%d records quarantined, want 1", n)
					}
					q, _ := os.ReadDir(filepath.Join(store.Dir(), statestore.QuarantineDir, RecordKind.Name))
					if len(q) != 1 {
						t.Errorf("quarantine holds %d files, want the bad record", len(q))
					}
					// The Tripwire runs: it arms, and Close leaves what New found
					// or repaired.
					if err := tw.Arm(80 << 20); err != nil {
						t.Fatalf("Arm after the repair: %v", err)
					}
					if err := tw.Close(); err != nil {
						t.Fatal(err)
					}
					if got := high(t, dir); got != tt.want {
						t.Errorf("memory.high = %q after Close, want %q", got, tt.want)
					}
					noRecords(t, store)
				})
			}
		}
	}
}

func TestARecordOfANewerAgentIsLeftAndMemoryHighNotWritten(t *testing.T) {
	newer := statestore.Kind{Name: RecordKind.Name, Version: RecordKind.Version + 1}
	setup := func(t *testing.T) (string, *statestore.Store) {
		dir := fakeV2(t, "67108864", 0)
		store := openStore(t, t.TempDir())
		if err := store.Put(newer, recordKey(dir), map[string]any{"id": 7, "original": "max", "more": true}); err != nil {
			t.Fatal(err)
		}
		return dir, store
	}
	check := func(t *testing.T, dir string, store *statestore.Store) {
		t.Helper()
		if got := high(t, dir); got != "67108864" {
			t.Errorf("memory.high = %q, want it as found", got)
		}
		if _, ok, err := store.Get(newer, recordKey(dir)); !ok || err != nil {
			t.Errorf("the newer record is gone: %v, %v", ok, err)
		}
		if n := store.Quarantined(RecordKind.Name); n != 0 {
			t.Errorf("%d records quarantined, want none", n)
		}
	}
	t.Run("the working set polls without the assist", func(t *testing.T) {
		dir, store := setup(t)
		tw := mustNew(t, dir, true, Options{Store: store, MaxPeriod: 2 * time.Millisecond})
		if err := tw.Arm(64 << 20); err != nil {
			t.Fatal(err)
		}
		writeFake(t, dir, fileCurrent, "0070000000\n")
		if f := waitFire(t, tw); f.Kind != KindWorkingSet {
			t.Errorf("fire %+v", f)
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		check(t, dir, store)
	})
	t.Run("memory.high refuses to arm", func(t *testing.T) {
		dir, store := setup(t)
		tw := mustNew(t, dir, true, Options{Mechanism: KindMemoryHigh, Store: store})
		if err := tw.Arm(32 << 20); !errors.Is(err, statestore.ErrUnsupported) {
			t.Errorf("Arm = %v, want the newer record's ErrUnsupported", err)
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		check(t, dir, store)
	})
}

func TestTheOldStateFileMovesIntoTheStore(t *testing.T) {
	writeLegacy := func(t *testing.T, legacy, dir, content string) string {
		t.Helper()
		path := legacyPath(legacy, dir)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	t.Run("a valid file of a crashed run is read, recorded, removed, and its original put back", func(t *testing.T) {
		dir := fakeV2(t, "67108864", 0)
		store, legacy := openStore(t, t.TempDir()), t.TempDir()
		path := writeLegacy(t, legacy, dir, `{"dir":"`+dir+`","id":`+itoa(inode(t, dir))+`,"original":"1073741824"}`+"\n")
		tw := mustNew(t, dir, true, Options{Store: store, LegacyStateDir: legacy})
		if got := high(t, dir); got != "1073741824" {
			t.Errorf("memory.high = %q, want the original of the old file", got)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the old file is still there: %v", err)
		}
		if err := tw.Arm(64 << 20); err != nil {
			t.Fatal(err)
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		if got := high(t, dir); got != "1073741824" {
			t.Errorf("memory.high = %q after Close, want 1073741824", got)
		}
		noRecords(t, store)
	})
	t.Run("a malformed file is moved aside and memory.high repaired", func(t *testing.T) {
		dir := fakeV2(t, "67108864", 0)
		store, legacy := openStore(t, t.TempDir()), t.TempDir()
		path := writeLegacy(t, legacy, dir, `{"dir":"x","id":7,"original":""}`)
		mustNew(t, dir, true, Options{Store: store, LegacyStateDir: legacy, Written: writtenRange})
		if got := high(t, dir); got != "max" {
			t.Errorf("memory.high = %q, want max", got)
		}
		if _, err := os.Stat(path + ".corrupt"); err != nil {
			t.Errorf("the malformed file was not moved aside: %v", err)
		}
	})
	t.Run("a record in the store wins over an old file", func(t *testing.T) {
		dir := fakeV2(t, "max", 0)
		store, legacy := openStore(t, t.TempDir()), t.TempDir()
		crashed(t, dir, store, "2147483648", "67108864")
		path := writeLegacy(t, legacy, dir, `{"dir":"`+dir+`","id":`+itoa(inode(t, dir))+`,"original":"max"}`)
		mustNew(t, dir, true, Options{Store: store, LegacyStateDir: legacy})
		if got := high(t, dir); got != "2147483648" {
			t.Errorf("memory.high = %q, want the store's original", got)
		}
		if _, err := os.Stat(path); err != nil {
			t.Errorf("the old file of the same directory was touched while the store had a record: %v", err)
		}
	})
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }

func TestDecideRepair(t *testing.T) {
	r := HighRange{Min: 100, Max: 200}
	tests := []struct {
		name    string
		found   string
		unarmed string
		ours    HighRange
		want    repairAction
	}{
		{"the value without an agent needs nothing", "max", "max", r, repairNothing},
		{"a configured value found needs nothing", "150", "150", r, repairNothing},
		{"a value within the range is the tripwire's", "150", "max", r, repairRestore},
		{"both ends of the range are the tripwire's", "200", "max", r, repairRestore},
		{"the low end too", "100", "max", r, repairRestore},
		{"below the range is someone else's", "99", "max", r, repairLeave},
		{"above the range is someone else's", "201", "max", r, repairLeave},
		{"max is never the tripwire's", "max", "1000", r, repairLeave},
		{"the zero range recognises nothing", "150", "max", HighRange{}, repairLeave},
		{"a value that does not parse is left", "15O", "max", r, repairLeave},
		{"a signed value is left", "+150", "max", r, repairLeave},
		{"a padded value is left", "0150", "max", r, repairLeave},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := decideRepair(tt.found, tt.unarmed, tt.ours); got != tt.want {
				t.Errorf("decideRepair(%q, %q, %+v) = %d, want %d", tt.found, tt.unarmed, tt.ours, got, tt.want)
			}
		})
	}
}

func TestDecodeRecord(t *testing.T) {
	dir := t.TempDir()
	store := openStore(t, dir)
	const key = "/sys/fs/cgroup/kubepods"
	file := func(r highRecord) []byte {
		t.Helper()
		if err := store.Put(RecordKind, key, r); err != nil {
			t.Fatal(err)
		}
		files, _ := filepath.Glob(filepath.Join(dir, RecordKind.Name, "*.rec"))
		if len(files) != 1 {
			t.Fatalf("record files %v", files)
		}
		b, err := os.ReadFile(files[0])
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	good := file(highRecord{ID: 42, Original: "max"})
	tests := []struct {
		name string
		b    []byte
		key  string
		want error
	}{
		{"a record as written decodes", good, key, nil},
		{"a record of another key is corrupt", good, key + "/x", statestore.ErrCorrupt},
		{"a flipped byte fails the checksum", bytes.Replace(good, []byte(`"max"`), []byte(`"mAx"`), 1), key, statestore.ErrCorrupt},
		{"an id of 0 does not validate", file(highRecord{ID: 0, Original: "max"}), key, statestore.ErrCorrupt},
		{"an original that is not a memory.high value does not validate", file(highRecord{ID: 1, Original: "1 2"}), key, statestore.ErrCorrupt},
		{"an empty file is corrupt", nil, key, statestore.ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := decodeRecord(tt.b, tt.key)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("decodeRecord = %+v, %v; want %v", r, err, tt.want)
			}
			if tt.want == nil && (r.ID != 42 || r.Original != "max") {
				t.Errorf("decoded %+v", r)
			}
		})
	}
}
