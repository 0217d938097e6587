package cgstat

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The fuzz targets below hold the parsers of this package to their
// contract on any bytes: no panic; either a result or a *ParseError that
// names the file ("fuzz"), matches ErrMalformed and points at a line of the
// input or the one after its end; never both a partial success and an
// error. The seeds are the fixture files plus testdata/fuzz/<target>.

// addSeeds adds every file matching the patterns (relative to testdata) as
// a seed.
func addSeeds(f *testing.F, patterns ...string) {
	f.Helper()
	for _, p := range patterns {
		names, err := filepath.Glob(filepath.Join("testdata", p))
		if err != nil {
			f.Fatal(err)
		}
		for _, n := range names {
			b, err := os.ReadFile(n)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
}

// checkParseError fails t unless err is a *ParseError for file "fuzz" at a
// line within b (or the line after its last, for a missing key).
func checkParseError(t *testing.T, b []byte, err error) {
	t.Helper()
	var pe *ParseError
	if !errors.As(err, &pe) || !errors.Is(err, ErrMalformed) {
		t.Fatalf("error %v (%T) is not a *ParseError matching ErrMalformed", err, err)
	}
	if pe.File != "fuzz" {
		t.Fatalf("error %v names %q, not the file", err, pe.File)
	}
	if lines := bytes.Count(b, []byte("\n")) + 1; pe.Line < 1 || pe.Line > lines+1 {
		t.Fatalf("error %v is at line %d, outside the input's %d lines", err, pe.Line, lines)
	}
}

// FuzzParseMemoryStat runs both memory.stat parsers (cgroup2 keys, v1
// total_ keys) on the same bytes: each either fails with a located
// *ParseError or finds its four required keys, and a second parse of the
// same bytes into a Memory already filled gives the same figures (the
// parsers reset what they own).
func FuzzParseMemoryStat(f *testing.F) {
	addSeeds(f, "v2*/*/memory.stat", "hybrid/memory/*/memory.stat", "hybrid/memory/*/*/memory.stat", "cgroupv*/memory.stat")
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, p := range []struct {
			name  string
			parse func([]byte, string, *Memory) error
		}{{"v2", parseMemoryStatV2}, {"v1", parseMemoryStatV1}} {
			var m Memory
			err := p.parse(b, "fuzz", &m)
			if err != nil {
				checkParseError(t, b, err)
				continue
			}
			if m.Fields&^optionalStatFields != 0 {
				t.Fatalf("%s: set fields %b it does not own", p.name, m.Fields)
			}
			again := Memory{Anon: 1, File: 2, WorkingsetRefaultFile: 3, WorkingsetActivate: 4, Fields: allStatFields}
			if err := p.parse(b, "fuzz", &again); err != nil || again != m {
				t.Fatalf("%s: second parse into a used Memory = %+v, %v; want %+v", p.name, again, err, m)
			}
		}
	})
}

// FuzzScanMemoryStat checks how ReadCgroupMemoryV1 and V2 take the
// kubelet's figures from memory.stat (fromStat, on the parsers above)
// against an independent reading of the same bytes: no panic; either a
// located *ParseError, or the value of each key's LAST line (the kernel
// writes each key once; for a malformed duplicate the last one wins):
// InactiveFile from inactive_file (v2) or total_inactive_file (v1) and, for
// the cgroup2 root, which has no memory.current, Usage = anon + file. A
// file accepted ends every line with a newline, splits each at its first
// space into a key and a value, and has the keys used with decimal values
// (the others need not be there).
func FuzzScanMemoryStat(f *testing.F) {
	addSeeds(f, "cgroupv*/memory.stat")
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, tc := range []struct {
			name     string
			v1       bool
			hasUsage bool
			inactive string
			required []string
		}{
			{"the cgroup2 root", false, false, "inactive_file", []string{"anon", "file", "inactive_file"}},
			{"a v1 cgroup", true, true, "total_inactive_file", []string{"total_inactive_file"}},
		} {
			const usage = 7 // what the usage file said
			c, err := fromStat(b, "fuzz", tc.v1, usage, tc.hasUsage)
			if err != nil {
				checkParseError(t, b, err)
				continue
			}
			last := map[string]string{}
			for _, line := range strings.SplitAfter(string(b), "\n") {
				if line == "" {
					continue
				}
				k, v, ok := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
				if !strings.HasSuffix(line, "\n") || !ok || k == "" || v == "" {
					t.Fatalf("%s: accepted line %q", tc.name, line)
				}
				last[k] = v
			}
			num := func(k string) uint64 {
				v, ok := last[k]
				n, err := strconv.ParseUint(v, 10, 64)
				if !ok || err != nil || strings.TrimLeft(v, "0123456789") != "" {
					t.Fatalf("%s: accepted %s %q (present %v): %v", tc.name, k, v, ok, err)
				}
				return n
			}
			for _, k := range tc.required {
				num(k)
			}
			want := CgroupMemory{Usage: usage, InactiveFile: num(tc.inactive)}
			if !tc.hasUsage {
				anon, file := num("anon"), num("file")
				if anon > math.MaxUint64-file {
					t.Fatalf("%s: accepted anon %d + file %d, which overflows", tc.name, anon, file)
				}
				want.Usage = anon + file
			}
			if c != want {
				t.Fatalf("%s: got %+v; the lines say %+v", tc.name, c, want)
			}
		}
	})
}

// FuzzParseMemoryEvents checks the cgroup2 memory.events parser: a success
// has every required counter's Field, a failure is a located *ParseError.
func FuzzParseMemoryEvents(f *testing.F) {
	addSeeds(f, "v2*/*/memory.events")
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Memory
		err := parseMemoryEventsV2(b, "fuzz", &m)
		if err != nil {
			checkParseError(t, b, err)
			return
		}
		if !m.Fields.Has(FieldEventsLow | FieldEventsHigh | FieldEventsOOM) {
			t.Fatalf("parsed without the required event fields: %b", m.Fields)
		}
		if m.Fields&FieldEventsOOMGroupKill == 0 && m.Events.OOMGroupKill != 0 {
			t.Fatalf("oom_group_kill %d without its field", m.Events.OOMGroupKill)
		}
	})
}

// FuzzParseOOMControl checks the v1 memory.oom_control parser: under_oom
// is only ever 0 or 1 on success, and FieldUnderOOM is set exactly then.
func FuzzParseOOMControl(f *testing.F) {
	addSeeds(f, "hybrid/memory/*/memory.oom_control", "hybrid/memory/*/*/memory.oom_control")
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Memory
		err := parseOOMControlV1(b, "fuzz", &m)
		if err != nil {
			checkParseError(t, b, err)
			if m.Fields.Has(FieldUnderOOM) {
				t.Fatal("FieldUnderOOM set on failure")
			}
			return
		}
		if !m.Fields.Has(FieldUnderOOM) {
			t.Fatal("parsed without FieldUnderOOM")
		}
	})
}

// FuzzParseSingle checks the one-number parser (memory.current, limits):
// on success the number printed back with its newline is the input (or
// "max\n" for Unlimited), so nothing is silently dropped or rounded.
func FuzzParseSingle(f *testing.F) {
	addSeeds(f, "v2*/*/memory.current", "v2*/*/memory.max", "v2*/*/memory.high",
		"hybrid/memory/*/memory.usage_in_bytes", "hybrid/memory/*/memory.limit_in_bytes")
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, allowMax := range []bool{false, true} {
			v, err := parseSingle(b, "fuzz", allowMax)
			if err != nil {
				checkParseError(t, b, err)
				continue
			}
			want := string(b)
			if allowMax && v == Unlimited && want == "max\n" {
				continue
			}
			// Leading zeros are digits too: compare numerically.
			got, ok := ParseUint(bytes.TrimSuffix(b, []byte("\n")))
			if !ok || got != v || want[len(want)-1] != '\n' {
				t.Fatalf("parseSingle(%q, %v) = %d, which does not print back", b, allowMax, v)
			}
		}
	})
}
