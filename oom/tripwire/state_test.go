package tripwire

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// crashed leaves dir as a Tripwire that armed and never closed leaves it:
// the record of the original in stateDir and the threshold in memory.high.
func crashed(t *testing.T, dir, stateDir, original, armed string) {
	t.Helper()
	fd, err := openDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	id, err := dirID(fd, dir)
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	if err := saveRecord(recordPath(stateDir, dir), highRecord{Dir: dir, ID: id, Original: original}); err != nil {
		t.Fatal(err)
	}
	writeFake(t, dir, fileHigh, armed+"\n")
}

func TestV2RecordsTheOriginalBeforeTheFirstWrite(t *testing.T) {
	dir := fakeV2(t, "1073741824", 0)
	state := t.TempDir()
	tw := mustNew(t, dir, true, Options{Mechanism: KindMemoryHigh, StateDir: state})
	rec := recordPath(state, dir)
	if _, err := os.Stat(rec); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a record before any Arm: %v", err)
	}
	if err := tw.Arm(64 << 20); err != nil {
		t.Fatal(err)
	}
	r, ok, err := loadRecord(rec)
	if err != nil || !ok || r.Original != "1073741824" || r.Dir != dir || r.ID == 0 {
		t.Fatalf("record %+v, %v, %v; want the original 1073741824 of %s", r, ok, err, dir)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(rec); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the record is still there after Close restored the original: %v", err)
	}
	left, _ := os.ReadDir(state)
	if len(left) != 0 {
		t.Errorf("files left in the state directory: %v", left)
	}
}

func TestV2AfterACrash(t *testing.T) {
	t.Run("a new Tripwire restores the recorded original on Close, without arming", func(t *testing.T) {
		dir := fakeV2(t, "max", 0)
		state := t.TempDir()
		crashed(t, dir, state, "max", "67108864")
		tw := mustNew(t, dir, true, Options{Mechanism: KindMemoryHigh, StateDir: state})
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		if got := readFake(t, dir, fileHigh); got != "max" {
			t.Errorf("memory.high = %q after Close, want the recorded original max", got)
		}
		if _, ok, _ := loadRecord(recordPath(state, dir)); ok {
			t.Error("the record is still there")
		}
	})
	t.Run("a new Tripwire that arms again restores the recorded original, not the crashed one's threshold", func(t *testing.T) {
		dir := fakeV2(t, "max", 0)
		state := t.TempDir()
		crashed(t, dir, state, "max", "67108864")
		tw := mustNew(t, dir, true, Options{Mechanism: KindMemoryHigh, StateDir: state})
		if err := tw.Arm(32 << 20); err != nil {
			t.Fatal(err)
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		if got := readFake(t, dir, fileHigh); got != "max" {
			t.Errorf("memory.high = %q after Close, want max", got)
		}
	})
	t.Run("a record of another cgroup at the same path is not used", func(t *testing.T) {
		dir := fakeV2(t, "1073741824", 0)
		state := t.TempDir()
		rec := recordPath(state, dir)
		if err := saveRecord(rec, highRecord{Dir: dir, ID: 1, Original: "max"}); err != nil {
			t.Fatal(err)
		}
		tw := mustNew(t, dir, true, Options{Mechanism: KindMemoryHigh, StateDir: state})
		if err := tw.Arm(64 << 20); err != nil {
			t.Fatal(err)
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		if got := readFake(t, dir, fileHigh); got != "1073741824" {
			t.Errorf("memory.high = %q, want this cgroup's own original 1073741824", got)
		}
	})
	t.Run("a malformed record is an error, not an original", func(t *testing.T) {
		dir := fakeV2(t, "max", 0)
		state := t.TempDir()
		if err := os.WriteFile(recordPath(state, dir), []byte(`{"dir":"x","id":7,"original":""}`), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := New(dir, true, Options{Mechanism: KindMemoryHigh, StateDir: state})
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("New = %v, want ErrMalformed", err)
		}
	})
}

func TestRecordPathIsOneFileBeneathTheStateDir(t *testing.T) {
	for _, dir := range []string{"/sys/fs/cgroup/kubepods", "/sys/fs/cgroup/kubepods/", "/sys/fs/cgroup/a/../kubepods"} {
		got := recordPath("/var/lib/nodeguard/tripwire", dir)
		if filepath.Dir(got) != "/var/lib/nodeguard/tripwire" || strings.Contains(filepath.Base(got), "..") {
			t.Errorf("recordPath(%q) = %q", dir, got)
		}
		if filepath.Base(got) != "memory.high.sys_fs_cgroup_kubepods.json" {
			t.Errorf("recordPath(%q) = %q, want memory.high.sys_fs_cgroup_kubepods.json", dir, got)
		}
	}
}
