package nodestats

import (
	"os"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/cgroups/cgstat"
)

func benchmarkParse(b *testing.B, file string, parse func(string, []byte) error) {
	data, err := os.ReadFile(file)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if err := parse(file, data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseMeminfo(b *testing.B) {
	benchmarkParse(b, "testdata/meminfo", func(n string, d []byte) error { _, err := ParseMeminfo(n, d); return err })
}

func BenchmarkParseVmstat(b *testing.B) {
	benchmarkParse(b, "testdata/vmstat", func(n string, d []byte) error { _, err := ParseVmstat(n, d); return err })
}

// The Read benchmarks read this machine's procfs: the kernel's cost of
// generating the file dominates.

func BenchmarkMeminfoReaderRead(b *testing.B) {
	r, err := OpenMeminfo(MeminfoPath)
	if err != nil {
		b.Skip(err)
	}
	defer r.Close()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Read(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadMeminfo(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ReadMeminfo(MeminfoPath); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVmstatReaderRead(b *testing.B) {
	r, err := OpenVmstat(VmstatPath)
	if err != nil {
		b.Skip(err)
	}
	defer r.Close()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Read(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadVmstat(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ReadVmstat(VmstatPath); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendObservations(b *testing.B) {
	mi := Meminfo{MemTotal: 32 << 30}
	root := cgstat.CgroupMemory{Usage: 8 << 30, InactiveFile: 2 << 30}
	fs := FSStats{CapacityBytes: 100 << 30, AvailableBytes: 50 << 30, Inodes: 1 << 20, InodesFree: 1 << 19}
	pids := PIDStats{PIDMax: 4194304, ThreadsMax: 255000, Running: 900}
	in := Inputs{Meminfo: &mi, Root: &root, Pods: &root, PodsLimit: 30 << 30, NodeFS: &fs, ImageFS: &fs, PIDs: &pids}
	buf := make([]Observation, 0, 7)
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendObservations(buf[:0], in, now)
	}
}
