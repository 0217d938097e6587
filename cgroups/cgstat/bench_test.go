package cgstat

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

// pods is how many pod cgroups one snapshot reads: the density nodeguard
// is built for (253 pause pods ran at once on a development machine).
const pods = 250

// cpuTime returns the CPU time this process has used, all threads.
func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchSnapshots reads every reader once per iteration and reports the
// process CPU time per snapshot beside the wall time (ns/op).
func benchSnapshots(b *testing.B, readers []*Reader) {
	ms := make([]Memory, len(readers))
	snapshot := func() {
		for i, r := range readers {
			if err := r.Read(&ms[i]); err != nil {
				b.Fatal(err)
			}
		}
	}
	snapshot() // opens the files
	b.ReportAllocs()
	n := 0
	cpu0 := cpuTime(b)
	for b.Loop() {
		snapshot()
		n++
	}
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(n), "cpu-ns/snapshot")
	b.ReportMetric(float64(len(readers)), "cgroups/snapshot")
}

// BenchmarkReadMemory250 reads 250 real sandbox cgroups, children of one
// parent sandbox, as one tick does. One op is one snapshot of all 250.
func BenchmarkReadMemory250(b *testing.B) {
	parent := cgtest.New(b)
	readers := make([]*Reader, pods)
	for i := range readers {
		c := parent.Child(b, fmt.Sprintf("pod%03d", i))
		src, err := SourceFor(c.Dirs())
		if err != nil {
			b.Fatal(err)
		}
		readers[i] = NewReader(src)
	}
	b.Cleanup(func() {
		for _, r := range readers {
			r.Close()
		}
	})
	benchSnapshots(b, readers)
}

// BenchmarkReadMemory250Fixture is BenchmarkReadMemory250 over fixture
// files on a regular filesystem: it measures the parsers and the syscalls
// without cgroupfs's cost of generating the content.
func BenchmarkReadMemory250Fixture(b *testing.B) {
	for _, tc := range []struct {
		name string
		src  Source
	}{
		{name: "v2", src: Source{Memory: testdataDir(b, "v2/pod"), PSI: testdataDir(b, "v2/pod")}},
		{name: "v1", src: Source{Memory: testdataDir(b, "hybrid/memory/"+ownV1+"/pod"), V1: true, PSI: testdataDir(b, "hybrid/unified/pod")}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			readers := make([]*Reader, pods)
			for i := range readers {
				readers[i] = NewReader(tc.src)
			}
			defer func() {
				for _, r := range readers {
					r.Close()
				}
			}()
			benchSnapshots(b, readers)
		})
	}
}

// BenchmarkContainerdStat compares, for one real sandbox cgroup, the fast
// path with the full path and with containerd's Load and Stat used
// directly. One op is one cgroup.
func BenchmarkContainerdStat(b *testing.B) {
	sb := cgtest.New(b)
	l := sb.Layout()
	dirs, err := l.Resolve(sb.Rel())
	if err != nil {
		b.Fatal(err)
	}
	memRel := strings.TrimPrefix(sb.MemoryDir(), l.Memory.Mount)

	b.Run("Reader.Read", func(b *testing.B) {
		src, err := SourceFor(sb.Dirs())
		if err != nil {
			b.Fatal(err)
		}
		r := NewReader(src)
		defer r.Close()
		benchSnapshots(b, []*Reader{r})
	})
	b.Run("Stater.Full", func(b *testing.B) {
		s := NewStater(l)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Full(dirs...); err != nil {
				b.Fatal(err)
			}
		}
	})
	if !l.Memory.V2() {
		b.Run("cgroup1.Load+Stat/memory", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				// containerd's default hierarchy: every v1 mount under
				// /sys/fs/cgroup; only the memory one has the sandbox.
				cg, err := cgroup1.Load(cgroup1.StaticPath(memRel))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := cg.Stat(cgroup1.IgnoreNotExist); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	if u := sb.UnifiedDir(); u != "" {
		b.Run("cgroup2.Load+Stat", func(b *testing.B) {
			group := strings.TrimPrefix(u, l.Unified.Mount)
			b.ReportAllocs()
			for b.Loop() {
				m, err := cgroup2.Load(group, cgroup2.WithMountpoint(l.Unified.Mount))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := m.Stat(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFullFixture reads the fixture pods through containerd.
func BenchmarkFullFixture(b *testing.B) {
	for _, tc := range []struct {
		name   string
		layout func() *cgroups.Layout
	}{
		{name: "v2", layout: func() *cgroups.Layout { return v2Layout(testdataDir(b, "v2")) }},
		{name: "hybrid", layout: func() *cgroups.Layout { return hybridLayout(testdataDir(b, "hybrid")) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			l := tc.layout()
			s, dirs := NewStater(l), resolve(b, l, "pod")
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Full(dirs...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
