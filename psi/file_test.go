package psi

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadSystemFixtures(t *testing.T) {
	tests := []struct {
		name     string
		dir      string
		wantOK   []Resource
		wantErrs map[Resource]error
	}{
		{
			name:     "this machine's files read and the missing irq file is unsupported",
			dir:      "system-6.18",
			wantOK:   []Resource{CPU, Memory, IO},
			wantErrs: map[Resource]error{IRQ: ErrUnsupported},
		},
		{
			name:   "a kernel with irq time accounting has all four",
			dir:    "system-irq",
			wantOK: []Resource{CPU, Memory, IO, IRQ},
		},
		{
			name:     "a malformed file and missing files are told apart",
			dir:      "system-broken",
			wantOK:   []Resource{CPU},
			wantErrs: map[Resource]error{Memory: ErrMalformed, IO: ErrUnsupported, IRQ: ErrUnsupported},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join("testdata", tt.dir)
			stats, errs := ReadSystem(dir)
			if len(stats)+len(errs) != len(Resources()) {
				t.Errorf("%d stats + %d errors, want %d resources in all", len(stats), len(errs), len(Resources()))
			}
			for _, r := range tt.wantOK {
				s, ok := stats[r]
				if !ok {
					t.Errorf("%s: missing, error %v", r, errs[r])
					continue
				}
				if _, both := errs[r]; both {
					t.Errorf("%s: both in stats and errors", r)
				}
				if !s.HasSome && !s.HasFull {
					t.Errorf("%s: neither line: %+v", r, s)
				}
			}
			if cpu, ok := stats[CPU]; ok && (cpu.HasFull || cpu.Full != (Line{})) {
				t.Errorf("system cpu keeps its undefined full line: %+v", cpu)
			}
			if irq, ok := stats[IRQ]; ok && (irq.HasSome || !irq.HasFull) {
				t.Errorf("irq = %+v, want only a full line", irq)
			}
			for r, want := range tt.wantErrs {
				err := errs[r]
				if !errors.Is(err, want) {
					t.Errorf("%s: %v, want an error matching %v", r, err, want)
				}
				if err != nil && !strings.Contains(err.Error(), filepath.Join(dir, string(r))) {
					t.Errorf("%s: error %q does not name the file", r, err)
				}
			}
			for r, err := range errs {
				if _, ok := tt.wantErrs[r]; !ok {
					t.Errorf("%s: unexpected error %v", r, err)
				}
			}
		})
	}
}

func TestFile(t *testing.T) {
	const (
		before = "some avg10=1.00 avg60=0.00 avg300=0.00 total=10\n"
		after  = "some avg10=2.00 avg60=0.00 avg300=0.00 total=20\nfull avg10=1.00 avg60=0.00 avg300=0.00 total=5\n"
	)
	t.Run("a missing file is unsupported", func(t *testing.T) {
		_, err := OpenFile(filepath.Join(t.TempDir(), "memory.pressure"))
		if !errors.Is(err, ErrUnsupported) || errors.Is(err, ErrMalformed) {
			t.Errorf("OpenFile() = %v, want an error matching only ErrUnsupported", err)
		}
	})
	t.Run("each Read sees the content at offset 0 anew", func(t *testing.T) {
		name := filepath.Join(t.TempDir(), "memory.pressure")
		writeFile(t, name, before)
		f, err := OpenFile(name)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		s1, err := f.Read()
		if err != nil || s1.Some.Avg10 != 1 || s1.HasFull {
			t.Fatalf("first Read() = %+v, %v", s1, err)
		}
		// Rewrite in place (not rename) so the open file sees it.
		writeFile(t, name, after)
		s2, err := f.Read()
		if err != nil || s2.Some.Avg10 != 2 || !s2.HasFull || s2.Full.Total != us(5) {
			t.Fatalf("second Read() = %+v, %v", s2, err)
		}
	})
	t.Run("garbage read through a File is a ParseError naming its path", func(t *testing.T) {
		name := filepath.Join(t.TempDir(), "io.pressure")
		writeFile(t, name, "some avg10=1.00\n")
		f, err := OpenFile(name)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		_, err = f.Read()
		var pe *ParseError
		if !errors.As(err, &pe) || pe.File != name || pe.Line != 1 {
			t.Errorf("Read() = %v, want a ParseError for %s line 1", err, name)
		}
	})
	t.Run("content that fills the buffer is rejected, not parsed truncated", func(t *testing.T) {
		name := filepath.Join(t.TempDir(), "cpu.pressure")
		writeFile(t, name, strings.Repeat(before, bufSize/len(before)+1))
		f, err := OpenFile(name)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Read(); !errors.Is(err, ErrMalformed) {
			t.Errorf("Read() = %v, want an error matching ErrMalformed", err)
		}
	})
	t.Run("a closed File says so", func(t *testing.T) {
		name := filepath.Join(t.TempDir(), "cpu.pressure")
		writeFile(t, name, before)
		f, err := OpenFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Errorf("second Close() = %v, want nil", err)
		}
		if _, err := f.Read(); !errors.Is(err, ErrClosed) {
			t.Errorf("Read() after Close = %v, want ErrClosed", err)
		}
	})
	t.Run("OpenSystem drops the system cpu full line and keeps memory's", func(t *testing.T) {
		for r, wantFull := range map[Resource]bool{CPU: false, Memory: true} {
			f, err := OpenSystem("testdata/system-6.18", r)
			if err != nil {
				t.Fatal(err)
			}
			s, err := f.Read()
			f.Close()
			if err != nil || s.HasFull != wantFull || !s.HasSome {
				t.Errorf("%s: Read() = %+v, %v; want HasFull %v", r, s, err, wantFull)
			}
		}
	})
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// hostFile is a pressure file of the machine the tests run on.
type hostFile struct{ kind, path string }

// hostFiles are the memory pressure files every test machine has: the
// procfs one and, where cgroup2 is mounted (hybrid or pure v2), the root
// cgroup's kernfs one, which goes through the cgroupfs read path.
func hostFiles() []hostFile {
	files := []hostFile{{"procfs", "/proc/pressure/memory"}}
	for _, p := range []string{"/sys/fs/cgroup/unified/memory.pressure", "/sys/fs/cgroup/memory.pressure"} {
		if _, err := os.Stat(p); err == nil {
			files = append(files, hostFile{"cgroupfs", p})
			break
		}
	}
	return files
}

func TestFileOnThisHost(t *testing.T) {
	for _, hf := range hostFiles() {
		name := hf.path
		t.Run("a "+hf.kind+" pressure file re-reads in place without allocating", func(t *testing.T) {
			f, err := OpenFile(name)
			if errors.Is(err, ErrUnsupported) {
				t.Skipf("no PSI here: %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			first, err := f.Read()
			if err != nil {
				t.Fatal(err)
			}
			var last Stats
			allocs := testing.AllocsPerRun(50, func() {
				if last, err = f.Read(); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("Read allocates %v times per call, want 0", allocs)
			}
			if !last.HasSome || last.Some.Total < first.Some.Total {
				t.Errorf("later Read %+v went back from %+v", last, first)
			}
		})
	}
}

// BenchmarkFileRead is the snapshot path: one pread and a parse.
func BenchmarkFileRead(b *testing.B) {
	for _, hf := range hostFiles() {
		name := hf.path
		b.Run(hf.kind, func(b *testing.B) {
			f, err := OpenFile(name)
			if err != nil {
				b.Skip(err)
			}
			defer f.Close()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := f.Read(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkOpenReadClose is what File saves: os.ReadFile and Parse.
func BenchmarkOpenReadClose(b *testing.B) {
	for _, hf := range hostFiles() {
		name := hf.path
		b.Run(hf.kind, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				data, err := os.ReadFile(name)
				if err != nil {
					b.Skip(err)
				}
				if _, err := Parse(data, name); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
