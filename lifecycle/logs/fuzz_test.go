package logs

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzParseRecord feeds arbitrary lines to the CRI log line parser, the
// one Read runs on every line of a container's log file (written by the
// runtime, read back after any crash, possibly torn). Whatever the bytes:
// no panic; a line that is not a record says why, briefly; a record's
// timestamp, stream and content are the line's own bytes, in order; and
// the line the runtime would write for the same content (its timestamp,
// stream and tag) parses back to the same record. Seeds are every line of
// testdata/*.log.
func FuzzParseRecord(f *testing.F) {
	files, err := filepath.Glob("testdata/*.log")
	if err != nil || len(files) == 0 {
		f.Fatalf("no CRI log fixtures in testdata (%v)", err)
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			f.Add(bytes.Clone(sc.Bytes()))
		}
	}
	f.Add([]byte("2024-05-01T10:00:00Z stdout F:x:y tagged"))
	f.Add([]byte("2024-05-01T10:00:00Z stdout F"))
	f.Fuzz(func(t *testing.T, line []byte) {
		line = bytes.Clone(line)
		rec, reason := parseRecord(line)
		if reason != "" {
			// truncate bounds each quoted field; the rest is fixed text.
			if len(reason) > 200 {
				t.Fatalf("reason is %d bytes: %q", len(reason), reason)
			}
			return
		}
		if rec.stream != StreamStdout && rec.stream != StreamStderr {
			t.Fatalf("record of stream %q", rec.stream)
		}
		prefix := append(append(bytes.Clone(rec.rawTS), ' '), rec.stream...)
		if !bytes.HasPrefix(line, prefix) || !bytes.HasSuffix(line, rec.content) ||
			len(prefix)+len(rec.content) > len(line) {
			t.Fatalf("record %q %q %q is not the line's own bytes: %q", rec.rawTS, rec.stream, rec.content, line)
		}
		if ts, err := time.Parse(time.RFC3339Nano, string(rec.rawTS)); err != nil || !ts.Equal(rec.ts) {
			t.Fatalf("timestamp %q parsed as %v, raw parses as %v (%v)", rec.rawTS, rec.ts, ts, err)
		}

		// What the runtime writes for this record (containerd's CRI
		// logger: RFC 3339 with nanoseconds, the stream, one tag, the
		// content up to the newline) reads back as the same record.
		tag := tagFull
		if rec.partial {
			tag = tagPartial
		}
		content, _, _ := bytes.Cut(rec.content, []byte{'\n'})
		written := rec.ts.Format(time.RFC3339Nano) + " " + string(rec.stream) + " " + tag + " " + string(content)
		back, reason := parseRecord([]byte(written))
		switch {
		case reason != "":
			t.Fatalf("the runtime's line %q for %q does not parse: %s", written, line, reason)
		case !back.ts.Equal(rec.ts) || back.stream != rec.stream || back.partial != rec.partial || !bytes.Equal(back.content, content):
			t.Fatalf("the runtime's line %q reads back as %v %q partial=%v %q, want %v %q partial=%v %q",
				written, back.ts, back.stream, back.partial, back.content, rec.ts, rec.stream, rec.partial, content)
		}
	})
}
