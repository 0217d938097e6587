package nodestats

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/cgstat"
	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

// The tests in this file read this machine's real files and check them
// against each other and against system calls that report the same
// quantities another way.

func TestLiveMeminfoIsSaneAndAgreesWithSysinfo(t *testing.T) {
	m, err := ReadMeminfo(MeminfoPath)
	if err != nil {
		t.Fatal(err)
	}
	for k := range numMeminfoKeys {
		if !m.Has(k) {
			t.Errorf("%s missing: every kernel since 4.20 writes it", k)
		}
	}
	if m.MemTotal == 0 || m.MemFree > m.MemTotal || m.MemAvailable > m.MemTotal || m.ActiveFile+m.InactiveFile > m.MemTotal {
		t.Errorf("implausible: %+v", m)
	}
	// fs/proc/meminfo.c computes these sums from one snapshot of the LRU
	// and slab counters, so they hold exactly.
	if m.Active != m.ActiveAnon+m.ActiveFile || m.Inactive != m.InactiveAnon+m.InactiveFile {
		t.Errorf("Active %d != %d + %d or Inactive %d != %d + %d", m.Active, m.ActiveAnon, m.ActiveFile, m.Inactive, m.InactiveAnon, m.InactiveFile)
	}
	if m.Slab != m.SReclaimable+m.SUnreclaim {
		t.Errorf("Slab %d != SReclaimable %d + SUnreclaim %d", m.Slab, m.SReclaimable, m.SUnreclaim)
	}
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		t.Fatal(err)
	}
	// Both are totalram_pages: sysinfo in units of mem_unit, meminfo in kB.
	if total := uint64(si.Totalram) * uint64(si.Unit); total != m.MemTotal {
		t.Errorf("MemTotal %d bytes, sysinfo totalram %d bytes", m.MemTotal, total)
	}

	r, err := OpenMeminfo(MeminfoPath)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i := range 3 {
		again, err := r.Read()
		if err != nil {
			t.Fatalf("read %d through the open descriptor: %v", i, err)
		}
		if again.MemTotal != m.MemTotal {
			t.Errorf("read %d: MemTotal %d, first read %d", i, again.MemTotal, m.MemTotal)
		}
	}
}

func TestLiveVmstatCountersOnlyGrow(t *testing.T) {
	r, err := OpenVmstat(VmstatPath)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	first, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	// Linux 5.9 split workingset_refault; every kernel since 4.13 has
	// oom_kill and since 4.8 the node-level scan counters.
	for _, k := range []VmstatKey{VmstatOOMKill, VmstatPgscanKswapd, VmstatPgscanDirect, VmstatPgstealKswapd, VmstatPgstealDirect, VmstatWorkingsetRefaultFile, VmstatPgMajFault, VmstatAllocStall} {
		if !first.Has(k) {
			t.Errorf("%s missing from %s", k, VmstatPath)
		}
	}
	b := make([]byte, 1<<20) // touch some memory between the reads
	for i := range b {
		b[i] = byte(i)
	}
	second, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	for k := range numVmstatKeys {
		v1, ok1 := first.Get(k)
		v2, ok2 := second.Get(k)
		if ok1 != ok2 || v2 < v1 {
			t.Errorf("%s went from %d (%v) to %d (%v)", k, v1, ok1, v2, ok2)
		}
	}
}

func TestLivePIDsAgreeWithSysinfo(t *testing.T) {
	p, err := ReadPIDs(ProcDir)
	if err != nil {
		t.Fatal(err)
	}
	if p.PIDMax <= 0 || p.ThreadsMax <= 0 || p.Running <= 0 || p.Running > p.Max() {
		t.Fatalf("implausible: %+v", p)
	}
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		t.Fatal(err)
	}
	// sysinfo's procs is the same nr_threads as loadavg's total, but 16
	// bits wide; the kubelet's fallback. Tasks come and go between the
	// two calls, so allow some slack.
	if p.Running < 1<<16 {
		if d := p.Running - int64(si.Procs); d < -64 || d > 64 {
			t.Errorf("loadavg counts %d tasks, sysinfo %d", p.Running, si.Procs)
		}
	}
	o := PIDAvailable(p, time.Now())
	if o.Available <= 0 || o.Available >= o.Capacity {
		t.Errorf("implausible pid.available: %+v", o)
	}
}

func TestLiveNodeFSOfTheRootFilesystem(t *testing.T) {
	st, err := NewFSProbe("/", 10*time.Second, nil).Stat(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	o := FSAvailable(SignalNodeFsAvailable, st, time.Now())
	if o.Capacity <= 0 || o.Available < 0 || o.Available > o.Capacity {
		t.Errorf("implausible nodefs.available: %+v", o)
	}
}

// TestLiveRootMemoryAgreesWithMeminfo reads the root memory cgroup of
// this host and checks it against /proc/meminfo: the kernel's root usage
// is file pages plus mapped anonymous pages (mm/memcontrol.c
// mem_cgroup_usage), which meminfo shows as Buffers + Cached + SwapCached
// and AnonPages, and the root's inactive file LRU is meminfo's
// Inactive(file). Pages the kernel does not charge to any cgroup make
// small differences; other tests on the machine make moving ones, so the
// samples are retried until meminfo holds still around the cgroup read.
func TestLiveRootMemoryAgreesWithMeminfo(t *testing.T) {
	l, err := cgroups.Discover()
	if err != nil {
		t.Fatal(err)
	}
	h := l.Memory
	cgtest.Need(t, h != nil && h.Root == "/", "the memory controller's root cgroup is not mounted here")
	read := cgstat.ReadCgroupMemoryV1
	if h.V2() {
		read = cgstat.ReadCgroupMemoryV2
	}
	const quiet = 32 << 20 // meminfo moved less than this around the read
	for try := 0; try < 50; try++ {
		before, err := ReadMeminfo(MeminfoPath)
		if err != nil {
			t.Fatal(err)
		}
		c, err := read(h.Mount)
		if err != nil {
			t.Fatalf("read the root memory cgroup at %s: %v", h.Mount, err)
		}
		after, err := ReadMeminfo(MeminfoPath)
		if err != nil {
			t.Fatal(err)
		}
		used := func(m Meminfo) uint64 { return m.Buffers + m.Cached + m.SwapCached + m.AnonPages }
		if absDiff(used(before), used(after)) > quiet || absDiff(before.InactiveFile, after.InactiveFile) > quiet {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		// Allow 5% of the value plus 64 MiB for uncharged pages.
		near := func(a, b uint64) bool { return absDiff(a, b) <= b/20+64<<20 }
		if !near(c.Usage, used(after)) {
			t.Errorf("root usage %d bytes, meminfo file + anon pages %d", c.Usage, used(after))
		}
		if !near(c.InactiveFile, after.InactiveFile) {
			t.Errorf("root inactive file %d bytes, meminfo Inactive(file) %d", c.InactiveFile, after.InactiveFile)
		}
		o := MemoryAvailable(after.MemTotal, c, time.Now())
		if o.Available <= 0 || o.Available > o.Capacity || o.Capacity != int64(after.MemTotal) {
			t.Errorf("implausible memory.available: %+v", o)
		}
		return
	}
	t.Skip("meminfo never held still for a comparison: the machine is busy")
}

func absDiff(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}

func TestLiveFilesExistWhereTheConstantsSay(t *testing.T) {
	for _, p := range []string{MeminfoPath, VmstatPath, ProcDir} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}
