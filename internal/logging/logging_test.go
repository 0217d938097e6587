package logging

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/internal/syncbuf"
)

// blockingWriter blocks every Write until released; what it was given is
// read with String.
type blockingWriter struct {
	release chan struct{}
	syncbuf.Buffer
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	<-w.release
	return w.Buffer.Write(p)
}

func TestABlockedWriterNeverBlocksTheLogger(t *testing.T) {
	w := &blockingWriter{release: make(chan struct{})}
	const queue, records = 8, 10000
	l := New(w, Options{Level: slog.LevelInfo, Queue: queue})
	log := l.Slog()
	start := time.Now()
	for i := range records {
		log.Info("record", "i", i)
	}
	took := time.Since(start)
	// 10000 records through a blocked output: each Handle is a clone and
	// a failed channel send, microseconds; a blocking logger would never
	// return.
	if took > 5*time.Second {
		t.Fatalf("logging %d records to a blocked writer took %v", records, took)
	}
	// At most queue records wait, and one is held by the writer.
	if d := l.Dropped(); d < records-queue-1 || d > records {
		t.Fatalf("dropped %d of %d records with a queue of %d, want at least %d", d, records, queue, records-queue-1)
	}
	close(w.release)
	l.Close(5 * time.Second)
	out := w.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) > queue+2 {
		t.Errorf("%d lines written, want at most the queue (%d), the one in hand and the drop report", len(lines), queue)
	}
	if last := lines[len(lines)-1]; !strings.Contains(last, "dropped_total=") {
		t.Errorf("the drop report is not after the records queued before the drops: %s", last)
	}
	if !strings.Contains(out, `msg="log records dropped: the output was too slow"`) || !strings.Contains(out, "dropped_total=") {
		t.Errorf("no line reports the drops:\n%s", out)
	}
	if !strings.Contains(lines[0], "i=0") {
		t.Errorf("the first record is not the first logged: %s", lines[0])
	}
	t.Logf("%d records to a blocked writer in %v: %d dropped, %d lines written", records, took, l.Dropped(), len(lines))
}

func TestRecordsAreWrittenInOrderOneLineEach(t *testing.T) {
	var out syncbuf.Buffer
	l := New(&out, Options{Level: slog.LevelDebug, Format: FormatJSON})
	log := l.Slog().With("component", "test").WithGroup("g")
	for i := range 100 {
		log.Debug("record", "i", i)
	}
	l.Close(5 * time.Second)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 100 {
		t.Fatalf("%d lines, want 100", len(lines))
	}
	for i, line := range lines {
		var rec struct {
			Time      string `json:"time"`
			Component string `json:"component"`
			G         struct {
				I int `json:"i"`
			} `json:"g"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line %d is not JSON: %v: %s", i, err, line)
		}
		if rec.G.I != i || rec.Component != "test" || rec.Time == "" {
			t.Fatalf("line %d: %s", i, line)
		}
	}
	if l.Dropped() != 0 {
		t.Errorf("%d dropped with nothing blocking", l.Dropped())
	}
}

func TestLevelAndFormatChangeAtRunTime(t *testing.T) {
	var out syncbuf.Buffer
	l := New(&out, Options{Level: slog.LevelInfo})
	log := l.Slog().With("k", "v")
	log.Debug("hidden")
	log.Info("as text")
	l.SetLevel(slog.LevelDebug)
	l.SetFormat(FormatJSON)
	log.Debug("as json")
	l.Close(5 * time.Second)
	got := out.String()
	if strings.Contains(got, "hidden") {
		t.Errorf("a debug record passed at info:\n%s", got)
	}
	if !strings.Contains(got, `msg="as text" k=v`) {
		t.Errorf("no text line with the derived attribute:\n%s", got)
	}
	if !strings.Contains(got, `"msg":"as json","k":"v"`) {
		t.Errorf("a derived handler did not follow the format change:\n%s", got)
	}
	if l.Level() != slog.LevelDebug || l.Format() != FormatJSON {
		t.Errorf("level %v format %v", l.Level(), l.Format())
	}
}

func TestJournalLinesCarryAPriorityAndNoTime(t *testing.T) {
	var out syncbuf.Buffer
	l := New(&out, Options{Level: slog.LevelDebug, Journal: true})
	log := l.Slog()
	log.Error("e")
	log.Warn("w")
	log.Info("i")
	log.Debug("d")
	l.Close(5 * time.Second)
	want := "<3>level=ERROR msg=e\n<4>level=WARN msg=w\n<6>level=INFO msg=i\n<7>level=DEBUG msg=d\n"
	if got := out.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestRecordsAfterCloseAreDroppedAndCounted(t *testing.T) {
	var out syncbuf.Buffer
	l := New(&out, Options{})
	l.Close(time.Second)
	l.Slog().Info("late")
	if l.Dropped() != 1 {
		t.Errorf("dropped %d, want 1", l.Dropped())
	}
}

func TestParseRefusesUnknownNames(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"an unknown level is named", func() error { _, err := ParseLevel("loud"); return err }(), `level "loud"`},
		{"an unknown format is named", func() error { _, err := ParseFormat("xml"); return err }(), `format "xml"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
				t.Errorf("got %v, want an error naming %s", c.err, c.want)
			}
		})
	}
	if f, err := ParseFormat("JSON"); err != nil || f != FormatJSON {
		t.Errorf("JSON: %v %v", f, err)
	}
}

func TestJournalStreamMatchesOnlyItsOwnStream(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "stream"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	t.Setenv("JOURNAL_STREAM", "")
	if JournalStream(f) {
		t.Error("matched without JOURNAL_STREAM")
	}
	t.Setenv("JOURNAL_STREAM", "1:2")
	if JournalStream(f) {
		t.Error("matched another stream")
	}
	t.Setenv("JOURNAL_STREAM", statID(t, f))
	if !JournalStream(f) {
		t.Error("did not match its own stream")
	}
}

func BenchmarkHandleIntoAFullQueue(b *testing.B) {
	w := &blockingWriter{release: make(chan struct{})}
	defer close(w.release)
	l := New(w, Options{Queue: 1})
	log := l.Slog()
	b.ReportAllocs()
	for b.Loop() {
		log.Info("record", "k", 1)
	}
}
