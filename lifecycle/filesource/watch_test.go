package filesource

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestWatchSaysWhichBatchesAreSettled drives a real inotify watch: a
// manifest moved in is a settled batch (applied at once); a creation
// still open, its close in a later batch, a rewrite in place, a removal,
// a move out and files that are not manifests are not. (A file created, written and closed at once
// is settled when the watch reads its events in one batch, and then it
// is a creation and a close: which, the test cannot choose.)
func TestWatchSaysWhichBatchesAreSettled(t *testing.T) {
	dir := t.TempDir()
	w, err := openWatch(dir)
	if err != nil {
		t.Fatal(err)
	}
	changed := make(chan bool, 1)
	done := make(chan error, 1)
	go func() { done <- w.run(changed) }()
	defer func() {
		w.Close()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	// next is the settledness of what one step made: every batch it
	// caused, merged as run merges them, read until the watch is quiet.
	next := func(step string) bool {
		t.Helper()
		var got, seen bool
		got = true
		for {
			select {
			case s := <-changed:
				got, seen = got && s, true
				continue
			case <-time.After(300 * time.Millisecond):
			}
			if !seen {
				t.Fatalf("%s: no event within 300 ms", step)
			}
			return got
		}
	}
	write := func(name string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("apiVersion: v1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	outside := t.TempDir()
	var opened *os.File

	for _, tc := range []struct {
		step    string
		do      func()
		settled bool
	}{
		{"a manifest created and still open", func() {
			f, err := os.Create(filepath.Join(dir, "a.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			opened = f
		}, false},
		{"the manifest written and closed", func() {
			if _, err := opened.WriteString("apiVersion: v1\n"); err != nil {
				t.Fatal(err)
			}
			if err := opened.Close(); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"the manifest rewritten in place (no creation)", func() { write("a.yaml") }, false},
		{"a manifest moved in", func() {
			write("../" + filepath.Base(outside) + "/b.yml")
			if err := os.Rename(filepath.Join(outside, "b.yml"), filepath.Join(dir, "b.yml")); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"a manifest renamed within (moved out and in)", func() {
			if err := os.Rename(filepath.Join(dir, "b.yml"), filepath.Join(dir, "c.json")); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"a file that is not a manifest rewritten", func() {
			write("notes.txt")
			write("notes.txt")
		}, false},
		{"a manifest removed", func() {
			if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
				t.Fatal(err)
			}
		}, false},
	} {
		tc.do()
		if got := next(tc.step); got != tc.settled {
			t.Errorf("%s: settled %v, want %v", tc.step, got, tc.settled)
		}
	}
}

// event encodes one struct inotify_event with its NUL-padded name.
func event(mask uint32, name string) []byte {
	padded := (len(name) + 1 + 15) / 16 * 16
	b := make([]byte, unix.SizeofInotifyEvent+padded)
	binary.NativeEndian.PutUint32(b[4:], mask)
	binary.NativeEndian.PutUint32(b[12:], uint32(padded))
	copy(b[unix.SizeofInotifyEvent:], name)
	return b
}

func TestSettledBatch(t *testing.T) {
	for _, tc := range []struct {
		name          string
		batch         [][]byte
		settled, gone bool
	}{
		{"created, written and closed in one batch", [][]byte{event(unix.IN_CREATE, "a.yaml"), event(unix.IN_CLOSE_WRITE, "a.yaml")}, true, false},
		{"created, still open", [][]byte{event(unix.IN_CREATE, "a.yaml")}, false, false},
		{"another file's close does not close it", [][]byte{event(unix.IN_CREATE, "a.yaml"), event(unix.IN_CLOSE_WRITE, "b.yaml")}, false, false},
		{"moved in", [][]byte{event(unix.IN_MOVED_TO, "a.json")}, true, false},
		{"rewritten in place: closed with no creation", [][]byte{event(unix.IN_CLOSE_WRITE, "a.yaml")}, false, false},
		{"a hidden file named like a manifest", [][]byte{event(unix.IN_CREATE, ".a.yaml"), event(unix.IN_CLOSE_WRITE, ".a.yaml")}, false, false},
		{"a temporary file renamed into a manifest", [][]byte{event(unix.IN_CREATE, ".a.yaml.1.tmp"), event(unix.IN_CLOSE_WRITE, ".a.yaml.1.tmp"),
			event(unix.IN_MOVED_FROM, ".a.yaml.1.tmp"), event(unix.IN_MOVED_TO, "a.yaml")}, true, false},
		{"only files that are not manifests", [][]byte{event(unix.IN_CREATE, "notes.txt"), event(unix.IN_CLOSE_WRITE, "notes.txt")}, false, false},
		{"a manifest moved out", [][]byte{event(unix.IN_MOVED_FROM, "a.yaml"), event(unix.IN_MOVED_TO, "a.yaml~")}, false, false},
		{"a manifest copied in while another is removed", [][]byte{event(unix.IN_CREATE, "a.yaml"), event(unix.IN_CLOSE_WRITE, "a.yaml"), event(unix.IN_DELETE, "b.yaml")}, false, false},
		{"removed", [][]byte{event(unix.IN_DELETE, "a.yaml")}, false, false},
		{"a directory named like a manifest", [][]byte{event(unix.IN_CREATE|unix.IN_ISDIR, "d.yaml")}, false, false},
		{"the directory went away", [][]byte{event(unix.IN_DELETE_SELF, ""), event(unix.IN_IGNORED, "")}, false, true},
		{"events lost", [][]byte{event(unix.IN_Q_OVERFLOW, "")}, false, false},
		{"nothing", nil, false, false},
	} {
		var b []byte
		for _, e := range tc.batch {
			b = append(b, e...)
		}
		settled, gone := settledBatch(b)
		if settled != tc.settled || gone != tc.gone {
			t.Errorf("%s: settled %v gone %v, want %v %v", tc.name, settled, gone, tc.settled, tc.gone)
		}
	}
}
