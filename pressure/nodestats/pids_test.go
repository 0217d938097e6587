package nodestats

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadPIDsFixture(t *testing.T) {
	p, err := ReadPIDs(filepath.Join("testdata", "proc"))
	if err != nil {
		t.Fatal(err)
	}
	want := PIDStats{PIDMax: 32768, ThreadsMax: 192729, Running: 112}
	if p != want {
		t.Errorf("got %+v, want %+v", p, want)
	}
	if p.Max() != 32768 {
		t.Errorf("Max() = %d, want pid_max 32768, the smaller limit", p.Max())
	}
}

func TestPIDMaxIsTheSmallerLimit(t *testing.T) {
	tests := []struct {
		name string
		p    PIDStats
		want int64
	}{
		{"pid_max below threads-max limits", PIDStats{PIDMax: 32768, ThreadsMax: 192729}, 32768},
		{"threads-max below pid_max limits", PIDStats{PIDMax: 4194304, ThreadsMax: 192729}, 192729},
		{"equal limits give that limit", PIDStats{PIDMax: 100, ThreadsMax: 100}, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Max(); got != tt.want {
				t.Errorf("Max() = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestParseLoadavgTasks(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    int64
		wantErr string
	}{
		{"the total after the slash is the task count", "0.55 0.34 0.26 1/91 25777\n", 91, ""},
		{"a file without a final newline parses", "3.76 1.30 0.61 2/112 28309", 112, ""},
		{"more than 65535 tasks are counted in full", "9.00 9.00 9.00 40/131072 4000000\n", 131072, ""},
		{"a fourth field without a slash is malformed", "0.55 0.34 0.26 91 25777\n", 0, "running/total"},
		{"four fields are malformed", "0.55 0.34 0.26 1/91\n", 0, "want 5 fields"},
		{"a total with letters is malformed", "0.55 0.34 0.26 1/9x 25777\n", 0, "total task count"},
		{"a running count with letters is malformed", "0.55 0.34 0.26 x/91 25777\n", 0, "running task count"},
		{"a second line is malformed", "0.55 0.34 0.26 1/91 25777\nmore\n", 0, "more than one line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseLoadavgTasks("loadavg", []byte(tt.text))
			if tt.wantErr != "" {
				if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error %v, want ErrMalformed saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}

func TestReadPIDsErrors(t *testing.T) {
	// fakeProc writes a procfs tree with the given files (relative path to
	// content); a nil content leaves the file out.
	fakeProc := func(t *testing.T, files map[string]*string) string {
		dir := t.TempDir()
		for name, content := range files {
			if content == nil {
				continue
			}
			path := filepath.Join(dir, name)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(*content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	s := func(v string) *string { return &v }
	good := func() map[string]*string {
		return map[string]*string{
			"sys/kernel/pid_max":     s("32768\n"),
			"sys/kernel/threads-max": s("192729\n"),
			"loadavg":                s("0.1 0.1 0.1 1/91 2\n"),
		}
	}
	tests := []struct {
		name   string
		change func(map[string]*string)
		want   error
		file   string
	}{
		{"a missing pid_max is unsupported", func(m map[string]*string) { m["sys/kernel/pid_max"] = nil }, ErrUnsupported, "pid_max"},
		{"a missing threads-max is unsupported", func(m map[string]*string) { m["sys/kernel/threads-max"] = nil }, ErrUnsupported, "threads-max"},
		{"a missing loadavg is unsupported", func(m map[string]*string) { m["loadavg"] = nil }, ErrUnsupported, "loadavg"},
		{"a pid_max that is not a number is malformed", func(m map[string]*string) { m["sys/kernel/pid_max"] = s("lots\n") }, ErrMalformed, "pid_max"},
		{"a threads-max out of int64 range is malformed", func(m map[string]*string) { m["sys/kernel/threads-max"] = s("18446744073709551615\n") }, ErrMalformed, "threads-max"},
		{"a broken loadavg is malformed", func(m map[string]*string) { m["loadavg"] = s("0.1 0.1\n") }, ErrMalformed, "loadavg"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := good()
			tt.change(files)
			_, err := ReadPIDs(fakeProc(t, files))
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.file) {
				t.Errorf("error %v, want %v naming %s", err, tt.want, tt.file)
			}
		})
	}
}
