package nodestats

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func addFixtureSeeds(f *testing.F, patterns ...string) {
	for _, p := range patterns {
		names, err := filepath.Glob(filepath.Join("testdata", p))
		if err != nil {
			f.Fatal(err)
		}
		for _, name := range names {
			b, err := os.ReadFile(name)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
}

// FuzzParseMeminfo checks that no input panics, that a parsed file has its
// required keys, and that writing the recorded keys back out in the
// kernel's format parses to the same values.
func FuzzParseMeminfo(f *testing.F) {
	addFixtureSeeds(f, "meminfo*", "bad/meminfo-*")
	f.Add([]byte("MemTotal: 1 kB\nMemFree: 1 kB\nActive(file): 0 kB\nInactive(file): 0 kB"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMeminfo("fuzz", b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "parse fuzz") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		var out strings.Builder
		for k := range numMeminfoKeys {
			v, ok := m.Get(k)
			if !ok {
				if requiredMeminfo&(1<<k) != 0 {
					t.Fatalf("parsed without required key %s", k)
				}
				continue
			}
			if v%1024 != 0 {
				t.Fatalf("%s = %d bytes is not whole kB", k, v)
			}
			fmt.Fprintf(&out, "%s: %d kB\n", k, v/1024)
		}
		again, err := ParseMeminfo("again", []byte(out.String()))
		if err != nil || again != m {
			t.Fatalf("round trip: %+v, %v; want %+v", again, err, m)
		}
	})
}

// FuzzParseVmstat checks that no input panics and that a parsed file has
// pgmajfault.
func FuzzParseVmstat(f *testing.F) {
	addFixtureSeeds(f, "vmstat*", "bad/vmstat-*")
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ParseVmstat("fuzz", b)
		if err == nil && !v.Has(VmstatPgMajFault) {
			t.Fatal("parsed without pgmajfault")
		}
	})
}

// FuzzParseLoadavgTasks checks the /proc/loadavg parser: no panic, a
// located *ParseError or a non-negative task count that is the number
// after the slash of the fourth field.
func FuzzParseLoadavgTasks(f *testing.F) {
	addFixtureSeeds(f, "proc/loadavg")
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := ParseLoadavgTasks("fuzz", b)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || pe.File != "fuzz" || pe.Line < 1 || pe.Line > 2 {
				t.Fatalf("error %v (%T) is not a *ParseError at line 1 or 2 of the file", err, err)
			}
			return
		}
		if n < 0 {
			t.Fatalf("negative task count %d", n)
		}
		line, _, _ := strings.Cut(string(b), "\n")
		_, total, _ := strings.Cut(strings.Fields(line)[3], "/")
		if want, err := strconv.ParseInt(total, 10, 64); err != nil || want != n {
			t.Fatalf("task count %d, the file says %q", n, total)
		}
	})
}
