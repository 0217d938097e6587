package cgstat

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/psi"
)

func TestSourceFor(t *testing.T) {
	hy := hybridLayout("/sys/fs/cgroup")
	v2 := v2Layout("/sys/fs/cgroup")
	t.Run("a hybrid cgroup reads memory from v1 and PSI from cgroup2", func(t *testing.T) {
		got, err := SourceFor(resolveMonitored(t, hy, "pod"))
		if err != nil {
			t.Fatal(err)
		}
		want := Source{Memory: "/sys/fs/cgroup/memory/" + ownV1 + "/pod", V1: true, PSI: "/sys/fs/cgroup/unified/pod"}
		if got != want {
			t.Errorf("got %+v, want %+v", got, want)
		}
	})
	t.Run("a cgroup2 cgroup reads memory and PSI from one directory", func(t *testing.T) {
		got, err := SourceFor(resolveMonitored(t, v2, "pod"))
		if err != nil {
			t.Fatal(err)
		}
		want := Source{Memory: "/sys/fs/cgroup/pod", PSI: "/sys/fs/cgroup/pod"}
		if got != want {
			t.Errorf("got %+v, want %+v", got, want)
		}
	})
	t.Run("directories outside any memory hierarchy are unsupported", func(t *testing.T) {
		l := hybridLayout("/sys/fs/cgroup", "cpu")
		_, err := SourceFor(resolve(t, l, "pod"))
		if !errors.Is(err, ErrUnsupported) {
			t.Errorf("error = %v, want ErrUnsupported", err)
		}
	})
}

func TestReaderReadsFixtures(t *testing.T) {
	v1Pod := testdataDir(t, "hybrid/memory/"+ownV1+"/pod")
	tests := []struct {
		name string
		src  Source
		want Memory
	}{
		{
			name: "a cgroup2 pod without limits reports max as Unlimited and every optional field",
			src:  Source{Memory: testdataDir(t, "v2/pod"), PSI: testdataDir(t, "v2/pod")},
			want: Memory{
				Usage: 106954752, Limit: Unlimited, High: Unlimited,
				Anon: 73400320, File: 31457280, ActiveFile: 10485760, InactiveFile: 20971520, Shmem: 1048576,
				WorkingsetRefaultAnon: 12, WorkingsetRefaultFile: 3401, WorkingsetActivate: 1203, WorkingsetRestore: 481,
				PSI: psiStats(
					psi.Line{Avg10: 1.25, Avg60: 0.40, Avg300: 0.08, Total: 123456 * time.Microsecond},
					psi.Line{Avg10: 0.50, Avg60: 0.10, Avg300: 0.02, Total: 65432 * time.Microsecond},
				),
				Fields: allStatFields | FieldHigh | FieldEventsLow | FieldEventsHigh | FieldEventsOOM | FieldEventsOOMGroupKill | FieldPSI,
			},
		},
		{
			name: "a cgroup2 pod after an OOM kill reports its limits and events",
			src:  Source{Memory: testdataDir(t, "v2/limited"), PSI: testdataDir(t, "v2/limited")},
			want: Memory{
				Usage: 33230848, Limit: 33554432, High: 31457280,
				Anon: 73400320, File: 31457280, ActiveFile: 10485760, InactiveFile: 20971520, Shmem: 1048576,
				WorkingsetRefaultAnon: 12, WorkingsetRefaultFile: 3401, WorkingsetActivate: 1203, WorkingsetRestore: 481,
				Events: MemoryEvents{High: 1532, Max: 74, OOM: 1, OOMKill: 1},
				PSI: psiStats(
					psi.Line{Avg10: 37.51, Avg60: 9.02, Avg300: 1.97, Total: 4512345 * time.Microsecond},
					psi.Line{Avg10: 30.10, Avg60: 7.44, Avg300: 1.61, Total: 3829011 * time.Microsecond},
				),
				Fields: allStatFields | FieldHigh | FieldEventsLow | FieldEventsHigh | FieldEventsOOM | FieldEventsOOMGroupKill | FieldPSI,
			},
		},
		{
			name: "a cgroup2 kernel without PSI reads without it and says so",
			src:  Source{Memory: testdataDir(t, "v2-5.8/pod"), PSI: testdataDir(t, "v2-5.8/pod")},
			want: Memory{
				Usage: 106954752, Limit: Unlimited, High: Unlimited,
				Anon: 73400320, File: 31457280, ActiveFile: 10485760, InactiveFile: 20971520, Shmem: 1048576,
				WorkingsetRefaultFile: 3401, WorkingsetActivate: 1200, WorkingsetRestore: 480,
				Fields: FieldShmem | FieldWorkingsetRefaultFile | FieldWorkingsetActivate | FieldWorkingsetRestore |
					FieldHigh | FieldEventsLow | FieldEventsHigh | FieldEventsOOM,
			},
		},
		{
			name: "a real v1 sandbox after two OOM kills at 32 MiB, with PSI from its cgroup2 directory",
			src:  Source{Memory: v1Pod, V1: true, PSI: testdataDir(t, "hybrid/unified/pod")},
			want: Memory{
				Usage: 417792, Limit: 32 << 20, High: Unlimited,
				Events:   MemoryEvents{OOMKill: 2},
				PSI:      psiStats(psi.Line{Total: 1232 * time.Microsecond}, psi.Line{Total: 1141 * time.Microsecond}),
				Fields:   FieldShmem | FieldWorkingsetRefaultAnon | FieldWorkingsetRefaultFile | FieldUnderOOM | FieldPSI,
				UnderOOM: false,
			},
		},
		{
			name: "a real v1 cgroup without a limit and without PSI reports Unlimited and no PSI",
			src:  Source{Memory: testdataDir(t, "hybrid/memory/"+ownV1), V1: true},
			want: Memory{
				Usage: 15896576, Limit: Unlimited, High: Unlimited,
				Anon: 2166784, File: 11825152, ActiveFile: 7618560, InactiveFile: 4202496,
				WorkingsetRefaultFile: 2894,
				Fields:                FieldShmem | FieldWorkingsetRefaultAnon | FieldWorkingsetRefaultFile | FieldUnderOOM,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(tc.src)
			defer r.Close()
			for i := range 2 { // the second read goes through the kept-open files
				var m Memory
				if err := r.Read(&m); err != nil {
					t.Fatalf("read %d: %v", i, err)
				}
				if m != tc.want {
					t.Errorf("read %d:\ngot  %+v\nwant %+v", i, m, tc.want)
				}
			}
		})
	}
}

func TestReaderErrors(t *testing.T) {
	t.Run("a cgroup directory that no longer exists is gone", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "removed")
		r := NewReader(Source{Memory: dir, PSI: dir})
		var m Memory
		if err := r.Read(&m); !errors.Is(err, ErrGone) {
			t.Errorf("error = %v, want ErrGone", err)
		}
	})
	t.Run("a hybrid cgroup whose cgroup2 directory was removed is gone", func(t *testing.T) {
		r := NewReader(Source{Memory: testdataDir(t, "hybrid/memory/"+ownV1+"/pod"), V1: true, PSI: filepath.Join(t.TempDir(), "removed")})
		var m Memory
		if err := r.Read(&m); !errors.Is(err, ErrGone) {
			t.Errorf("error = %v, want ErrGone", err)
		}
	})
	t.Run("a required file missing from an existing cgroup is unsupported, not gone", func(t *testing.T) {
		dir := copyTree(t, "v2/pod")
		if err := os.Remove(filepath.Join(dir, "memory.events")); err != nil {
			t.Fatal(err)
		}
		r := NewReader(Source{Memory: dir, PSI: dir})
		var m Memory
		err := r.Read(&m)
		if !errors.Is(err, ErrUnsupported) || errors.Is(err, ErrGone) {
			t.Errorf("error = %v, want ErrUnsupported only", err)
		}
	})
	t.Run("a malformed file fails the reading with a ParseError naming the file", func(t *testing.T) {
		dir := copyTree(t, "v2/pod")
		if err := os.WriteFile(filepath.Join(dir, "memory.current"), []byte("lots\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		r := NewReader(Source{Memory: dir, PSI: dir})
		var m Memory
		err := r.Read(&m)
		var pe *ParseError
		if !errors.As(err, &pe) || pe.File != filepath.Join(dir, "memory.current") || !errors.Is(err, ErrMalformed) {
			t.Errorf("error = %v, want a ParseError for %s", err, filepath.Join(dir, "memory.current"))
		}
	})
	t.Run("a malformed memory.pressure fails the reading with this package's ParseError", func(t *testing.T) {
		dir := copyTree(t, "v2/pod")
		name := filepath.Join(dir, "memory.pressure")
		if err := os.WriteFile(name, []byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=soon\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		r := NewReader(Source{Memory: dir, PSI: dir})
		var m Memory
		err := r.Read(&m)
		var pe *ParseError
		if !errors.As(err, &pe) || pe.File != name || pe.Line != 1 || !errors.Is(err, ErrMalformed) {
			t.Errorf("error = %v, want a ParseError for line 1 of %s", err, name)
		}
	})
	t.Run("a symbolic link in place of a cgroup file is refused", func(t *testing.T) {
		dir := copyTree(t, "v2/pod")
		f := filepath.Join(dir, "memory.max")
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(dir, "memory.high"), f); err != nil {
			t.Fatal(err)
		}
		r := NewReader(Source{Memory: dir, PSI: dir})
		var m Memory
		if err := r.Read(&m); err == nil || !strings.Contains(err.Error(), "memory.max") {
			t.Errorf("error = %v, want a refusal to open memory.max", err)
		}
	})
	t.Run("content beyond the initial buffer is read whole", func(t *testing.T) {
		dir := copyTree(t, "v2/pod")
		name := filepath.Join(dir, "memory.stat")
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		// Push the required keys past the first 4 KiB.
		pad := strings.Repeat("future_counter 1\n", 2*initialBuf/17)
		if err := os.WriteFile(name, append([]byte(pad), b...), 0o644); err != nil {
			t.Fatal(err)
		}
		r := NewReader(Source{Memory: dir, PSI: dir})
		var m Memory
		if err := r.Read(&m); err != nil {
			t.Fatal(err)
		}
		if m.InactiveFile != 20971520 {
			t.Errorf("InactiveFile = %d, want 20971520", m.InactiveFile)
		}
	})
	t.Run("a closed reader fails with fs.ErrClosed", func(t *testing.T) {
		dir := testdataDir(t, "v2/pod")
		r := NewReader(Source{Memory: dir, PSI: dir})
		var m Memory
		if err := r.Read(&m); err != nil {
			t.Fatal(err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if err := r.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		if err := r.Read(&m); !errors.Is(err, fs.ErrClosed) {
			t.Errorf("error = %v, want fs.ErrClosed", err)
		}
	})
}

func TestReaderReadAllocatesNothing(t *testing.T) {
	tests := []struct {
		name string
		src  Source
	}{
		{name: "on cgroup2", src: Source{Memory: testdataDir(t, "v2/pod"), PSI: testdataDir(t, "v2/pod")}},
		{name: "on v1 with PSI from cgroup2", src: Source{Memory: testdataDir(t, "hybrid/memory/"+ownV1+"/pod"), V1: true, PSI: testdataDir(t, "hybrid/unified/pod")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(tc.src)
			defer r.Close()
			var m Memory
			if err := r.Read(&m); err != nil { // opens the files
				t.Fatal(err)
			}
			var err error
			allocs := testing.AllocsPerRun(100, func() { err = r.Read(&m) })
			if err != nil {
				t.Fatal(err)
			}
			if allocs != 0 {
				t.Errorf("Read allocates %v times per call, want 0", allocs)
			}
		})
	}
}
