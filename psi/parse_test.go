package psi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// us is a duration of n microseconds, as the files count totals.
func us(n int64) time.Duration { return time.Duration(n) * time.Microsecond }

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseFixtures(t *testing.T) {
	tests := []struct {
		name string
		file string
		want Stats
	}{
		{
			name: "this machine's system cpu file has a some line and a full line of zeros",
			file: "testdata/system-6.18/cpu",
			want: Stats{
				Some:    Line{Avg10: 0.65, Avg60: 1.46, Avg300: 2.50, Total: us(82966777)},
				HasSome: true, HasFull: true,
			},
		},
		{
			name: "this machine's system memory file has both lines",
			file: "testdata/system-6.18/memory",
			want: Stats{
				Some:    Line{Avg10: 0.62, Avg60: 0.56, Avg300: 0.15, Total: us(576307)},
				Full:    Line{Avg10: 0.54, Avg60: 0.49, Avg300: 0.13, Total: us(500890)},
				HasSome: true, HasFull: true,
			},
		},
		{
			name: "this machine's system io file has both lines",
			file: "testdata/system-6.18/io",
			want: Stats{
				Some:    Line{Avg10: 0.82, Avg60: 0.82, Avg300: 0.42, Total: us(6047514)},
				Full:    Line{Avg10: 0.76, Avg60: 0.74, Avg300: 0.37, Total: us(5160116)},
				HasSome: true, HasFull: true,
			},
		},
		{
			name: "a cgroup2 memory.pressure of a sandbox under a memory hog parses",
			file: "testdata/files/cgroup2-memory.pressure",
			want: Stats{
				Some:    Line{Avg10: 2.82, Avg60: 0.75, Avg300: 0.16, Total: us(549268)},
				Full:    Line{Avg10: 2.82, Avg60: 0.75, Avg300: 0.16, Total: us(549268)},
				HasSome: true, HasFull: true,
			},
		},
		{
			name: "a cpu file of a kernel before 5.13 has no full line",
			file: "testdata/files/cpu-5.10",
			want: Stats{
				Some:    Line{Avg10: 12.34, Avg60: 5.67, Avg300: 1.00, Total: us(987654321)},
				HasSome: true,
			},
		},
		{
			name: "an irq file has only a full line",
			file: "testdata/files/irq",
			want: Stats{
				Full:    Line{Avg10: 0.01, Total: us(1234)},
				HasFull: true,
			},
		},
		{
			name: "a file without a final newline parses",
			file: "testdata/files/no-final-newline",
			want: Stats{
				Some:    Line{Avg10: 0.50, Avg60: 0.25, Avg300: 0.05, Total: us(42)},
				Full:    Line{Avg10: 0.25, Avg60: 0.10, Avg300: 0.01, Total: us(21)},
				HasSome: true, HasFull: true,
			},
		},
		{
			name: "averages of 100 and the largest total a Duration holds parse",
			file: "testdata/files/saturated",
			want: Stats{
				Some:    Line{Avg10: 100, Avg60: 100, Avg300: 100, Total: us(9223372036854775)},
				Full:    Line{Avg10: 100, Avg60: 100, Avg300: 100, Total: us(9223372036854775)},
				HasSome: true, HasFull: true,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(readFixture(t, tt.file), tt.file)
			if err != nil {
				t.Fatalf("Parse() = %v", err)
			}
			// Exact comparison on purpose: the fast decimal path must
			// give the same float64 as strconv.ParseFloat.
			if got != tt.want {
				t.Errorf("Parse() =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func TestParseRejectsGarbage(t *testing.T) {
	tests := []struct {
		name     string
		file     string
		wantLine int
		wantMsg  string
	}{
		{"an empty file has no line to read", "empty", 0, "no \"some\" or \"full\" line"},
		{"a blank line between the lines is rejected on its own line", "blank-line", 2, "empty line"},
		{"an unknown kind is rejected", "unknown-kind", 1, "want a line starting with"},
		{"a full line without avg300 is rejected on line 2", "missing-avg300", 2, "avg300"},
		{"a negative total is rejected", "negative-total", 1, "total"},
		{"an average above 100 percent is rejected", "avg-above-100", 1, "avg10 is not a percentage"},
		{"a word instead of a number is rejected", "bad-number", 1, "avg10 is not a percentage"},
		{"a total that overflows a Duration is rejected", "total-overflow", 1, "total"},
		{"a second some line is rejected", "duplicate-some", 2, "second some line"},
		{"a second full line is rejected", "duplicate-full", 2, "second full line"},
		{"a field after total is rejected", "extra-field", 1, "after total"},
		{"carriage returns are rejected", "crlf", 1, "after total"},
		{"tabs instead of spaces are rejected", "tabs", 1, "want a line starting with"},
		{"an average without an integer part is rejected", "leading-dot", 1, "avg10 is not a percentage"},
		{"an empty total is rejected on line 2", "empty-total", 2, "total"},
		{"binary junk is rejected", "binary", 1, "want a line starting with"},
		{"fields out of order are rejected", "fields-out-of-order", 1, "avg10="},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join("testdata", "garbage", tt.file)
			s, err := Parse(readFixture(t, file), file)
			if err == nil {
				t.Fatalf("Parse() = %+v, want an error", s)
			}
			if s != (Stats{}) {
				t.Errorf("Parse() returned %+v with its error, want zero Stats", s)
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("Parse() = %v (%T), want a *ParseError", err, err)
			}
			if pe.File != file || pe.Line != tt.wantLine {
				t.Errorf("ParseError names %s line %d, want %s line %d", pe.File, pe.Line, file, tt.wantLine)
			}
			if !strings.Contains(pe.Msg, tt.wantMsg) {
				t.Errorf("message %q does not say %q", pe.Msg, tt.wantMsg)
			}
			if !errors.Is(err, ErrMalformed) || errors.Is(err, ErrUnsupported) {
				t.Errorf("error %v: matches ErrMalformed %v (want true), ErrUnsupported %v (want false)",
					err, errors.Is(err, ErrMalformed), errors.Is(err, ErrUnsupported))
			}
			if !strings.Contains(err.Error(), file) {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
}

func TestParseDoesNotAllocate(t *testing.T) {
	b := readFixture(t, "testdata/system-6.18/memory")
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := Parse(b, "memory"); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Parse allocates %v times per call, want 0", allocs)
	}
}

func FuzzParse(f *testing.F) {
	for _, dir := range []string{"testdata/files", "testdata/garbage", "testdata/system-6.18", "testdata/system-irq"} {
		names, err := filepath.Glob(filepath.Join(dir, "*"))
		if err != nil {
			f.Fatal(err)
		}
		for _, n := range names {
			f.Add(readFixture(f, n))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b, "fuzz")
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || pe.File != "fuzz" {
				t.Fatalf("error %v (%T) is not a *ParseError naming the file", err, err)
			}
			if pe.Line < 0 || pe.Line > strings.Count(string(b), "\n")+1 {
				t.Fatalf("ParseError line %d outside the input's %d lines", pe.Line, strings.Count(string(b), "\n")+1)
			}
			return
		}
		if !s.HasSome && !s.HasFull {
			t.Fatalf("Parse succeeded with neither line: %+v", s)
		}
		for _, l := range []struct {
			has  bool
			line Line
		}{{s.HasSome, s.Some}, {s.HasFull, s.Full}} {
			if !l.has {
				if l.line != (Line{}) {
					t.Fatalf("absent line is not zero: %+v", s)
				}
				continue
			}
			for _, a := range []float64{l.line.Avg10, l.line.Avg60, l.line.Avg300} {
				if !(a >= 0 && a <= 100) { // also rejects NaN
					t.Fatalf("average %v outside [0,100]: %+v", a, s)
				}
			}
			if l.line.Total < 0 || l.line.Total%time.Microsecond != 0 {
				t.Fatalf("total %v is negative or not whole microseconds", l.line.Total)
			}
		}
		if ref, err := referenceParse(b); err != nil || ref != s {
			t.Fatalf("Parse() = %+v, reference parser = %+v, %v", s, ref, err)
		}
	})
}

// referenceParse is a slow parser built on strings and strconv, for
// checking that whatever Parse accepts it reads exactly as strconv does.
func referenceParse(b []byte) (Stats, error) {
	var s Stats
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		f := strings.Split(line, " ")
		if len(f) != 5 {
			return Stats{}, fmt.Errorf("%q: %d fields", line, len(f))
		}
		var l Line
		for i, dst := range []*float64{&l.Avg10, &l.Avg60, &l.Avg300} {
			_, v, _ := strings.Cut(f[i+1], "=")
			a, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return Stats{}, err
			}
			*dst = a
		}
		_, v, _ := strings.Cut(f[4], "=")
		total, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return Stats{}, err
		}
		l.Total = us(total)
		switch f[0] {
		case "some":
			s.Some, s.HasSome = l, true
		case "full":
			s.Full, s.HasFull = l, true
		}
	}
	return s, nil
}

// BenchmarkParse parses this machine's system memory file, the shape of
// every cgroup memory.pressure read on the snapshot path.
func BenchmarkParse(b *testing.B) {
	data := readFixture(b, "testdata/system-6.18/memory")
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data, "memory"); err != nil {
			b.Fatal(err)
		}
	}
}
