package cgstat

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

const mib = 1 << 20

// hogMiB is what the hogs below allocate and touch.
const hogMiB = 32

// slack bounds what else a hog's cgroup is charged beyond the hog's own
// memory: the Go runtime of the re-executed test binary, its stacks and
// page tables, and the shell that started it.
const slack = 48 * mib

func newReader(t *testing.T, sb *cgtest.Sandbox) *Reader {
	t.Helper()
	src, err := SourceFor(sb.Dirs())
	if err != nil {
		t.Fatal(err)
	}
	r := NewReader(src)
	t.Cleanup(func() { r.Close() })
	return r
}

func mustRead(t *testing.T, r *Reader) Memory {
	t.Helper()
	var m Memory
	if err := r.Read(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestReaderFollowsARealHogAndItsRemoval(t *testing.T) {
	sb := cgtest.New(t)
	r := newReader(t, sb)
	before := mustRead(t, r)
	if before.Limit != Unlimited {
		t.Errorf("Limit of a new sandbox = %d, want Unlimited", before.Limit)
	}
	if sb.UnifiedDir() != "" && !before.Fields.Has(FieldPSI) {
		t.Errorf("no PSI although the sandbox has a cgroup2 directory %s", sb.UnifiedDir())
	}

	h := startHog(t, sb, hogMiB)
	h.waitReady(t)
	during := mustRead(t, r)
	t.Logf("before: usage %d anon %d; with a %d MiB hog: usage %d anon %d file %d working set %d",
		before.Usage, before.Anon, hogMiB, during.Usage, during.Anon, during.File, during.WorkingSet())
	if during.Usage < before.Usage+hogMiB*mib || during.Usage > before.Usage+hogMiB*mib+slack {
		t.Errorf("Usage = %d, want %d plus %d MiB (and at most %d MiB more)", during.Usage, before.Usage, hogMiB, slack/mib)
	}
	if during.Anon < hogMiB*mib {
		t.Errorf("Anon = %d, want at least %d MiB", during.Anon, hogMiB)
	}
	if ws := during.WorkingSet(); ws < hogMiB*mib || ws > during.Usage {
		t.Errorf("WorkingSet() = %d, want between %d MiB and Usage %d", ws, hogMiB, during.Usage)
	}

	h.stdin.Close()
	if err := h.wait(t); err != nil {
		t.Fatalf("hog: %v", err)
	}
	after := mustRead(t, r)
	if after.Anon >= hogMiB*mib/2 {
		t.Errorf("Anon after the hog exited = %d, want its %d MiB released", after.Anon, hogMiB)
	}

	if err := sb.Remove(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		var m Memory
		if err := r.Read(&m); !errors.Is(err, ErrGone) {
			t.Fatalf("read %d after removal: error = %v, want ErrGone", i, err)
		}
	}
}

func TestReaderCountsARealOOMKill(t *testing.T) {
	sb := cgtest.New(t, cgtest.WithMemoryLimit(32*mib))
	r := newReader(t, sb)
	before := mustRead(t, r)
	if before.Limit != 32*mib || before.Events.OOMKill != 0 {
		t.Fatalf("new sandbox: Limit %d OOMKill %d, want 32 MiB and 0", before.Limit, before.Events.OOMKill)
	}

	h := startHog(t, sb, 2*hogMiB)
	err := h.wait(t)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("hog of %d MiB under a 32 MiB limit ended with %v, want SIGKILL", 2*hogMiB, err)
	}
	after := mustRead(t, r)
	kernel, err := sb.OOMKills()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after the OOM kill: %+v", after.Events)
	if after.Events.OOMKill != 1 || after.Events.OOMKill != kernel {
		t.Errorf("Events.OOMKill = %d, kernel's own count %d, want 1", after.Events.OOMKill, kernel)
	}
	if sb.Layout().Memory.V2() && (after.Events.Max == 0 || after.Events.OOM == 0) {
		t.Errorf("Events = %+v, want max and oom counted on cgroup2", after.Events)
	}
	if after.Fields.Has(FieldPSI) && after.PSI.Some.Total <= before.PSI.Some.Total {
		t.Errorf("PSI some total %v did not grow from %v while the hog reclaimed at its limit", after.PSI.Some.Total, before.PSI.Some.Total)
	}
}

// TestReaderCountsV1FailcntOnTheMemoryCounter checks Events.Max on v1 with
// only memory.limit_in_bytes set. (With memory.memsw.limit_in_bytes at the
// same value, as cgtest and runc set it, the kernel charges memsw first; on
// Linux 6.18 neither failcnt then counts.)
func TestReaderCountsV1FailcntOnTheMemoryCounter(t *testing.T) {
	sb := cgtest.New(t)
	if sb.Layout().Memory.V2() {
		t.Skip("v1 only: cgroup2 has no failcnt")
	}
	// Our own sandbox: set the memory limit alone, memsw stays unlimited.
	if err := os.WriteFile(filepath.Join(sb.MemoryDir(), "memory.limit_in_bytes"), []byte("33554432"), 0); err != nil {
		t.Fatal(err)
	}
	r := newReader(t, sb)
	h := startHog(t, sb, 2*hogMiB)
	_ = h.wait(t)
	m := mustRead(t, r)
	if m.Events.Max == 0 || m.Events.OOMKill != 1 {
		t.Errorf("Events = %+v, want failcnt counted in Max and one OOM kill", m.Events)
	}
}

func TestFullReadsARealSandbox(t *testing.T) {
	sb := cgtest.New(t)
	l := sb.Layout()
	s := NewStater(l)
	dirs, err := l.Resolve(sb.Rel())
	if err != nil {
		t.Fatal(err)
	}
	h := startHog(t, sb, hogMiB)
	h.waitReady(t)
	fast := mustRead(t, newReader(t, sb))
	f, err := s.Full(dirs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("full: %s", dump(f))
	if f.Memory == nil {
		t.Fatal("no memory section")
	}
	if f.Memory.Usage < hogMiB*mib || f.Memory.Anon < hogMiB*mib {
		t.Errorf("Memory usage %d anon %d, want at least %d MiB each", f.Memory.Usage, f.Memory.Anon, hogMiB)
	}
	if d := int64(f.Memory.Usage) - int64(fast.Usage); d < -4*mib || d > 4*mib {
		t.Errorf("Full usage %d and Reader usage %d differ by more than 4 MiB", f.Memory.Usage, fast.Usage)
	}
	if f.CPU == nil || f.CPU.Usage <= 0 {
		t.Errorf("CPU = %+v, want the hog's page touching counted", f.CPU)
	}
	if l.Mode == cgroups.ModeHybrid {
		// cgtest makes hybrid sandboxes in the memory and cgroup2
		// hierarchies only.
		if f.Throttling != nil || f.IO != nil || f.Pids != nil {
			t.Errorf("hybrid sandbox reports sections it has no directory for: %s", dump(f))
		}
	}

	h.stdin.Close()
	_ = h.wait(t)
	if err := sb.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Full(dirs...); !errors.Is(err, ErrGone) {
		t.Errorf("Full of a removed sandbox: error = %v, want ErrGone", err)
	}
}

// TestFullReadsOwnCgroupAcrossHierarchyRoots reads this process's own
// cgroup, which on the development machines is /process_api/<hash> in the
// memory hierarchy and the root in the others, where some v1 files (pids)
// do not exist.
func TestFullReadsOwnCgroupAcrossHierarchyRoots(t *testing.T) {
	cgtest.RequirePrivileged(t)
	l, err := cgroups.Discover()
	if err != nil {
		t.Fatal(err)
	}
	dirs, err := l.Resolve(".")
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewStater(l).Full(dirs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("own cgroup: %s", dump(f))
	// A cgroup2 root has no memory.current (the VM lane runs tests in the
	// root cgroup): memory is then not reported, which is right.
	ownIsV2Root := l.Memory != nil && l.Memory.V2() && l.Memory.Own == "/"
	switch {
	case f.CPU == nil || f.CPU.Usage == 0:
		t.Errorf("own cgroup lacks CPU: %s", dump(f))
	case ownIsV2Root && f.Memory != nil:
		t.Errorf("memory reported for the cgroup2 root, which has no memory.current: %s", dump(f))
	case !ownIsV2Root && (f.Memory == nil || f.Memory.Usage == 0):
		t.Errorf("own cgroup lacks memory: %s", dump(f))
	}
	for _, d := range dirs {
		h := d.Hierarchy
		if !h.V2() && h.Has("pids") && d.Rel == "/" && f.Pids != nil {
			t.Errorf("Pids = %+v for a v1 root, which has no pids.current", f.Pids)
		}
	}
}

// TestReaderOOMKillScopeInAParent pins down where an OOM kill in a
// limited child counts, which decides whether a pod-level cgroup sees its
// containers' kills: in the parent too on cgroup2 (memory.events is
// hierarchical), in the child alone on v1 (memory.oom_control's oom_kill
// is local; measured on Linux 6.18).
func TestReaderOOMKillScopeInAParent(t *testing.T) {
	parent := cgtest.New(t)
	child := parent.Child(t, "container")
	if err := child.SetMemoryLimit(32 * mib); err != nil {
		t.Fatal(err)
	}
	rp, rc := newReader(t, parent), newReader(t, child)
	h := startHog(t, child, 2*hogMiB)
	_ = h.wait(t)
	p, c := mustRead(t, rp), mustRead(t, rc)
	wantParent := uint64(0)
	if parent.Layout().Memory.V2() {
		wantParent = 1
	}
	if c.Events.OOMKill != 1 || p.Events.OOMKill != wantParent {
		t.Errorf("OOMKill: child %d, parent %d, want 1 and %d", c.Events.OOMKill, p.Events.OOMKill, wantParent)
	}
}
