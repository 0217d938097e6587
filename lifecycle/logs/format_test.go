package logs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadFixtures(t *testing.T) {
	tests := []struct {
		name string
		file string
		opts Options
		want string
	}{
		{name: "both streams come in file order", file: "simple.log", opts: Options{Tail: -1},
			want: "hello\noops\n\nworld with  two spaces\nsecond error\n"},
		{name: "stdout alone", file: "simple.log", opts: Options{Tail: -1, Stream: StreamStdout},
			want: "hello\n\nworld with  two spaces\n"},
		{name: "stderr alone", file: "simple.log", opts: Options{Tail: -1, Stream: StreamStderr},
			want: "oops\nsecond error\n"},
		{name: "all is the zero value's meaning too", file: "simple.log", opts: Options{Tail: -1, Stream: StreamAll},
			want: "hello\noops\n\nworld with  two spaces\nsecond error\n"},
		{name: "the last two lines", file: "simple.log", opts: Options{Tail: 2},
			want: "world with  two spaces\nsecond error\n"},
		{name: "the last line of stdout counts stdout lines only", file: "simple.log", opts: Options{Tail: 1, Stream: StreamStdout},
			want: "world with  two spaces\n"},
		{name: "a tail longer than the log is the whole log", file: "simple.log", opts: Options{Tail: 100, Stream: StreamStderr},
			want: "oops\nsecond error\n"},
		{name: "partial records join into their line per stream, a final partial has no newline, an unterminated record is skipped",
			file: "partial.log", opts: Options{Tail: -1},
			want: "err part and its end\nfirst part, second part, last part\nnext line\nno newline at exit"},
		{name: "a tail counts joined lines", file: "partial.log", opts: Options{Tail: 2, Stream: StreamStdout},
			want: "next line\nno newline at exit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := Read(t.Context(), filepath.Join("testdata", tt.file), tt.opts, &b); err != nil {
				t.Fatal(err)
			}
			if b.String() != tt.want {
				t.Errorf("got %q\nwant %q", b.String(), tt.want)
			}
		})
	}
}

func TestReadRefusesMalformedLines(t *testing.T) {
	tests := []struct {
		name, file string
		line       int
		reason     string
	}{
		{"a timestamp that is not RFC 3339", "bad-timestamp.log", 3, `timestamp "2024-05-01" is not RFC 3339`},
		{"a stream that is neither stdout nor stderr", "bad-stream.log", 2, `stream "stdin"`},
		{"a tag that is neither P nor F", "bad-tag.log", 2, `tag "X"`},
		{"an empty line", "empty-line.log", 2, "empty line"},
		{"a line of plain text", "no-fields.log", 1, "timestamp"},
		{"a record without a tag", "no-tag.log", 1, "no tag after the stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join("testdata", tt.file)
			err := Read(t.Context(), path, Options{Tail: 10}, &bytes.Buffer{})
			var lfe *FormatError
			if !errors.As(err, &lfe) || !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want a *FormatError", err)
			}
			if lfe.Line != tt.line || lfe.Path != path || !strings.Contains(err.Error(), tt.reason) {
				t.Errorf("err = %v, want line %d and %q", err, tt.line, tt.reason)
			}
			if want := fmt.Sprintf("line %d:", tt.line); !strings.Contains(err.Error(), want) {
				t.Errorf("message %q does not name %q", err, want)
			}
		})
	}
}

func TestReadOtherErrors(t *testing.T) {
	t.Run("a missing file is fs.ErrNotExist", func(t *testing.T) {
		err := Read(t.Context(), filepath.Join(t.TempDir(), "nope.log"), Options{Tail: -1}, &bytes.Buffer{})
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("an unknown stream is an invalid option", func(t *testing.T) {
		err := Read(t.Context(), filepath.Join("testdata", "simple.log"), Options{Tail: -1, Stream: "stdin"}, &bytes.Buffer{})
		if !errors.Is(err, ErrInvalidOption) {
			t.Errorf("err = %v", err)
		}
	})
}

func TestReadLongLines(t *testing.T) {
	// Longer than the reader's 64 KiB buffer, split by the runtime into
	// 16 KiB partial records as containerd does.
	long := strings.Repeat("0123456789abcdef", 8<<10) // 128 KiB
	var f strings.Builder
	for i := 0; i < len(long); i += 16 << 10 {
		tag := "P"
		if i+16<<10 >= len(long) {
			tag = "F"
		}
		fmt.Fprintf(&f, "2024-05-01T10:00:00Z stdout %s %s\n", tag, long[i:i+16<<10])
	}
	// And one record that is itself longer than the buffer.
	fmt.Fprintf(&f, "2024-05-01T10:00:01Z stderr F %s\n", long)
	path := filepath.Join(t.TempDir(), "0.log")
	if err := os.WriteFile(path, []byte(f.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Read(t.Context(), path, Options{Tail: -1}, &b); err != nil {
		t.Fatal(err)
	}
	if want := long + "\n" + long + "\n"; b.String() != want {
		t.Errorf("got %d bytes, want %d", b.Len(), len(want))
	}
}

func BenchmarkRead(b *testing.B) {
	var f strings.Builder
	for i := range 10000 {
		fmt.Fprintf(&f, "2024-05-01T10:00:00.%09dZ stdout F line %d of a typical application log with some text\n", i, i)
	}
	path := filepath.Join(b.TempDir(), "0.log")
	if err := os.WriteFile(path, []byte(f.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(f.Len()))
	for b.Loop() {
		if err := Read(b.Context(), path, Options{Tail: 100}, &bytes.Buffer{}); err != nil {
			b.Fatal(err)
		}
	}
}
