package logs

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/internal/syncbuf"
)

// rec renders one CRI log record written at second s.
func rec(s int, stream, tag, content string) string {
	return fmt.Sprintf("%s %s %s %s\n", ts(s).Format(time.RFC3339Nano), stream, tag, content)
}

func ts(s int) time.Time { return time.Date(2026, 12, 1, 10, 0, s, 0, time.UTC) }

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func writeGzip(t *testing.T, path, content string) {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte(content))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, b.String())
}

func stamp(s int) string { return ts(s).Format(stampFormat) }

// rotatedLog makes a live log with two rotated files, the older gzipped,
// as a Rotator leaves them; a partial line runs from one file into the
// next, and there is a stray file that is not a rotated one.
func rotatedLog(t *testing.T) string {
	dir := t.TempDir()
	live := filepath.Join(dir, "0.log")
	writeGzip(t, live+"."+stamp(2)+gzSuffix, rec(1, "stdout", "F", "one")+rec(2, "stderr", "F", "two"))
	writeFile(t, live+"."+stamp(4), rec(3, "stdout", "F", "three")+rec(4, "stdout", "P", "fo"))
	writeFile(t, live, rec(5, "stdout", "F", "ur")+rec(6, "stderr", "F", "five")+rec(7, "stdout", "F", "six"))
	writeFile(t, live+".unrelated", "not a log\n")
	writeFile(t, live+"."+stamp(9)+gzSuffix+tmpSuffix, "an interrupted compression\n")
	return live
}

func TestRead(t *testing.T) {
	live := rotatedLog(t)
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"all lines come from the rotated files in order, then the live file", Options{Tail: -1},
			"one\ntwo\nthree\nfour\nfive\nsix\n"},
		{"tail counts lines across files", Options{Tail: 4}, "three\nfour\nfive\nsix\n"},
		{"tail larger than the log is all of it", Options{Tail: 100}, "one\ntwo\nthree\nfour\nfive\nsix\n"},
		{"tail 0 is nothing", Options{Tail: 0}, ""},
		{"a tail of two billion lines is all of it, without two billion slots", Options{Tail: 2_000_000_000}, "one\ntwo\nthree\nfour\nfive\nsix\n"},
		{"tail 1 is the last line", Options{Tail: 1}, "six\n"},
		{"since skips older lines", Options{Tail: -1, Since: ts(3)}, "three\nfour\nfive\nsix\n"},
		{"a joined line is as old as its first part", Options{Tail: -1, Since: ts(5)}, "five\nsix\n"},
		{"timestamps prefix each line with the runtime's", Options{Tail: 2, Timestamps: true},
			ts(6).Format(time.RFC3339Nano) + " five\n" + ts(7).Format(time.RFC3339Nano) + " six\n"},
		{"a joined line carries its first part's timestamp", Options{Tail: -1, Since: ts(4), Timestamps: true, Stream: StreamStdout},
			ts(4).Format(time.RFC3339Nano) + " four\n" + ts(7).Format(time.RFC3339Nano) + " six\n"},
		{"stdout alone", Options{Tail: -1, Stream: StreamStdout}, "one\nthree\nfour\nsix\n"},
		{"stderr alone", Options{Tail: -1, Stream: StreamStderr}, "two\nfive\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := Read(t.Context(), live, tt.opts, &b); err != nil {
				t.Fatal(err)
			}
			if b.String() != tt.want {
				t.Errorf("got %q, want %q", b.String(), tt.want)
			}
		})
	}
}

func TestReadEdges(t *testing.T) {
	t.Run("an unfinished line is written without a newline, a fragment still being written is not", func(t *testing.T) {
		live := filepath.Join(t.TempDir(), "0.log")
		writeFile(t, live, rec(1, "stdout", "F", "a")+rec(2, "stdout", "P", "no newline")+"2026-12-01T10:00:03Z stdout F still be")
		var b bytes.Buffer
		if err := Read(t.Context(), live, Options{Tail: -1}, &b); err != nil || b.String() != "a\nno newline" {
			t.Errorf("got %q, %v", b.String(), err)
		}
	})
	t.Run("a line longer than the read buffer is whole", func(t *testing.T) {
		live := filepath.Join(t.TempDir(), "0.log")
		long := strings.Repeat("x", 200<<10)
		writeFile(t, live, rec(1, "stdout", "F", long))
		var b bytes.Buffer
		if err := Read(t.Context(), live, Options{Tail: -1}, &b); err != nil || b.String() != long+"\n" {
			t.Errorf("got %d bytes, %v", b.Len(), err)
		}
	})
	t.Run("a malformed line is a FormatError naming the file and line", func(t *testing.T) {
		live := filepath.Join(t.TempDir(), "0.log")
		writeFile(t, live, rec(1, "stdout", "F", "a")+"garbage\n")
		err := Read(t.Context(), live, Options{Tail: 10}, &bytes.Buffer{})
		var fe *FormatError
		if !errors.As(err, &fe) || !errors.Is(err, ErrMalformed) || fe.Path != live || fe.Line != 2 {
			t.Errorf("err = %v, want a FormatError for %s line 2", err, live)
		}
	})
	t.Run("an unknown stream is ErrInvalidOption", func(t *testing.T) {
		live := filepath.Join(t.TempDir(), "0.log")
		writeFile(t, live, rec(1, "stdout", "F", "a"))
		if err := Read(t.Context(), live, Options{Stream: "stdin"}, &bytes.Buffer{}); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("a missing log without rotated files is fs.ErrNotExist", func(t *testing.T) {
		if err := Read(t.Context(), filepath.Join(t.TempDir(), "0.log"), Options{}, &bytes.Buffer{}); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("between a rotation's rename and the reopen the rotated files are read", func(t *testing.T) {
		live := filepath.Join(t.TempDir(), "0.log")
		writeFile(t, live+"."+stamp(1), rec(1, "stdout", "F", "a"))
		var b bytes.Buffer
		if err := Read(t.Context(), live, Options{Tail: -1}, &b); err != nil || b.String() != "a\n" {
			t.Errorf("got %q, %v", b.String(), err)
		}
	})
}

// TestReadFollowsAcrossRotation: a follower sees the lines written to the
// live file, then, after the file is renamed and a new one created (a
// rotation and the runtime's reopen), the lines of the renamed file's last
// writes and of the new file; it returns once Running says the container
// ended, with its last line.
func TestReadFollowsAcrossRotation(t *testing.T) {
	live := filepath.Join(t.TempDir(), "0.log")
	writeFile(t, live, rec(1, "stdout", "F", "before"))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var out syncbuf.Buffer
	var ended atomic.Bool
	done := make(chan error, 1)
	go func() {
		done <- Read(ctx, live, Options{Tail: 1, Follow: true, Poll: 5 * time.Millisecond,
			Running: func(context.Context) bool { return !ended.Load() }}, &out)
	}()
	waitFor := func(want string) {
		t.Helper()
		for out.String() != want {
			select {
			case <-ctx.Done():
				t.Fatalf("follower output %q, want %q", out.String(), want)
			case err := <-done:
				t.Fatalf("Read returned early (%v) with %q, want %q", err, out.String(), want)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	appendTo := func(path, s string) {
		t.Helper()
		f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	waitFor("before\n")
	// A record that reaches the file in two writes: the follower waits for
	// its end; and a partial record joined with the next.
	half := rec(2, "stdout", "P", "half")
	appendTo(live, half[:10])
	appendTo(live, half[10:])
	appendTo(live, rec(3, "stdout", "F", " line"))
	waitFor("before\nhalf line\n")

	// Rotate while the follower holds the old file open.
	if err := os.Rename(live, live+"."+stamp(3)); err != nil {
		t.Fatal(err)
	}
	appendTo(live+"."+stamp(3), rec(4, "stdout", "F", "last write before the reopen"))
	appendTo(live, rec(5, "stderr", "F", "after the reopen"))
	waitFor("before\nhalf line\nlast write before the reopen\nafter the reopen\n")

	appendTo(live, rec(6, "stdout", "F", "goodbye"))
	ended.Store(true)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("Read did not return after the container ended")
	}
	if want := "before\nhalf line\nlast write before the reopen\nafter the reopen\ngoodbye\n"; out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
}

func TestReadFollowEndsWithItsContext(t *testing.T) {
	live := filepath.Join(t.TempDir(), "0.log")
	writeFile(t, live, rec(1, "stdout", "F", "a"))
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	var b bytes.Buffer
	if err := Read(ctx, live, Options{Tail: -1, Follow: true, Poll: 5 * time.Millisecond}, &b); err != nil || b.String() != "a\n" {
		t.Errorf("got %q, %v", b.String(), err)
	}
}
