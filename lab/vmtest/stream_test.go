package vmtest

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestCopyUntilMarker(t *testing.T) {
	const m = "NODEGUARD-VM-EXIT-0123abcd"
	tests := []struct {
		name       string
		in         string
		wantOut    string
		wantStatus int
		wantFound  bool
	}{
		{"output ending in a newline is copied exactly", "=== RUN TestA\nPASS\n\n" + m + "=0\n", "=== RUN TestA\nPASS\n", 0, true},
		{"output without a final newline is copied exactly", "partial line\n" + m + "=1\n", "partial line", 1, true},
		{"no output at all", "\n" + m + "=0\n", "", 0, true},
		{"the status is the test's", "FAIL\n\n" + m + "=2\n", "FAIL\n", 2, true},
		{"what follows the marker is dropped", "ok\n\n" + m + "=0\nreboot: Restarting system\n", "ok\n", 0, true},
		{"a look-alike with another nonce is output", "NODEGUARD-VM-EXIT-ffff=0\n\n" + m + "=0\n", "NODEGUARD-VM-EXIT-ffff=0\n", 0, true},
		{"the marker inside a line is output", "say " + m + "=0\n\n" + m + "=3\n", "say " + m + "=0\n", 3, true},
		{"a marker with a carriage return still counts", "ok\r\n\r\n" + m + "=0\r\n", "ok\r\n\r", 0, true},
		{"a status that is not a number is output", "\n" + m + "=x\n", "\n" + m + "=x\n", 0, false},
		{"a stream without a marker is copied whole", "=== RUN TestA\npanic: boom\n", "=== RUN TestA\npanic: boom\n", 0, false},
		{"a stream cut mid-line keeps the partial line", "=== RUN TestA\nhalf", "=== RUN TestA\nhalf", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			readers := []struct {
				name string
				r    io.Reader
			}{
				{"in one read", strings.NewReader(tt.in)},
				{"a byte at a time", iotest.OneByteReader(strings.NewReader(tt.in))},
			}
			for _, rd := range readers {
				var out bytes.Buffer
				status, found, err := CopyUntilMarker(&out, rd.r, m)
				if err != nil {
					t.Fatalf("%s: %v", rd.name, err)
				}
				if out.String() != tt.wantOut || status != tt.wantStatus || found != tt.wantFound {
					t.Errorf("%s: got (%q, %d, %v), want (%q, %d, %v)", rd.name, out.String(), status, found, tt.wantOut, tt.wantStatus, tt.wantFound)
				}
			}
		})
	}
}

func TestCopyUntilMarkerReportsErrors(t *testing.T) {
	boom := errors.New("boom")
	if _, found, err := CopyUntilMarker(&bytes.Buffer{}, iotest.ErrReader(boom), "M"); !errors.Is(err, boom) || found {
		t.Errorf("read error: found %v, err %v; want the read error", found, err)
	}
	w := errWriter{boom}
	if _, _, err := CopyUntilMarker(w, strings.NewReader("line\nM=0\n"), "M"); !errors.Is(err, boom) {
		t.Errorf("write error: err %v, want the write error", err)
	}
}

type errWriter struct{ err error }

func (w errWriter) Write([]byte) (int, error) { return 0, w.err }
