package pressure_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/pressure"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// The test binary doubles as a process that holds a known amount of memory.
func TestMain(m *testing.M) {
	if os.Getenv("NODEGUARD_TEST_HOLD_MIB") != "" {
		var mib int
		fmt.Sscan(os.Getenv("NODEGUARD_TEST_HOLD_MIB"), &mib)
		b := make([]byte, mib<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		fmt.Println("ready")
		time.Sleep(30 * time.Second) // bounded: the test kills it sooner
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func find(s *pressure.Snapshot, rel string) (pressure.Cgroup, bool) {
	for _, c := range s.Cgroups {
		if c.Rel == rel {
			return c, true
		}
	}
	return pressure.Cgroup{}, false
}

func TestSnapshotFollowsCgroupsAndMemory(t *testing.T) {
	cgtest.RequirePrivileged(t)
	parent := cgtest.New(t)
	layout := parent.Layout()
	snapper, err := pressure.New(pressure.Config{Layout: layout, Roots: []string{parent.Rel()}, PodsRoot: parent.Rel(), Allocatable: 1 << 30, NodeFSPath: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer snapper.Close()

	child := parent.Child(t, "holder")
	var rel string
	for _, d := range child.Dirs() {
		if d.Hierarchy.ID == layout.Memory.ID {
			rel = d.Rel
		}
	}
	snapper.Add(rel)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "NODEGUARD_TEST_HOLD_MIB=48")
	out, _ := cmd.StdoutPipe()
	if err := child.Start(t, cmd); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := out.Read(buf); err != nil {
		t.Fatalf("holder never got ready: %v", err)
	}

	snap := snapper.Snapshot(context.Background(), time.Now())
	if len(snap.Errors) != 0 {
		t.Fatalf("node errors: %v", snap.Errors)
	}
	c, ok := find(snap, rel)
	if !ok {
		t.Fatalf("snapshot has no %s among %d cgroups", rel, len(snap.Cgroups))
	}
	if c.Err != nil {
		t.Fatal(c.Err)
	}
	if ws := c.Memory.WorkingSet(); ws < 40<<20 || ws > 200<<20 {
		t.Errorf("working set %d bytes, want about the 48 MiB held", ws)
	}
	if memID, _ := child.MemoryID(); c.Key.ID != memID {
		t.Errorf("key id %d, want the memory cgroup's %d", c.Key.ID, memID)
	}
	for _, sig := range []nodestats.Signal{nodestats.SignalMemoryAvailable, nodestats.SignalPIDAvailable, nodestats.SignalNodeFsAvailable, nodestats.SignalAllocatableMemoryAvailable} {
		if _, ok := snap.Signal(sig); !ok {
			t.Errorf("no %s observation", sig)
		}
	}
	if o, _ := snap.Signal(nodestats.SignalMemoryAvailable); o.Available <= 0 || o.Available > o.Capacity {
		t.Errorf("memory.available %d of %d", o.Available, o.Capacity)
	}

	cmd.Process.Kill()
	cmd.Wait()
	if err := child.Remove(); err != nil {
		t.Fatal(err)
	}
	snap = snapper.Snapshot(context.Background(), time.Now())
	if _, ok := find(snap, rel); ok {
		t.Error("a removed cgroup is still in the snapshot")
	}
}

// BenchmarkSnapshot250 reads snapshots of 250 real pod-like cgroups: with
// the default cadence (limits, event counters, cpu and io pressure every
// 5th tick) and with everything read on every tick. It reports wall ns/op
// and the process CPU time per snapshot.
func BenchmarkSnapshot250(b *testing.B) {
	cgtest.RequirePrivileged(b)
	parent := cgtest.New(b)
	for i := 0; i < 250; i++ {
		parent.Child(b, fmt.Sprintf("pod%03d", i))
	}
	for _, bc := range []struct {
		name string
		slow int
	}{{"default-cadence", 0}, {"everything-every-tick", 1}} {
		b.Run(bc.name, func(b *testing.B) {
			snapper, err := pressure.New(pressure.Config{Layout: parent.Layout(), Roots: []string{parent.Rel()}, SlowEvery: bc.slow})
			if err != nil {
				b.Fatal(err)
			}
			defer snapper.Close()
			ctx := context.Background()
			first := snapper.Snapshot(ctx, time.Now())
			if len(first.Cgroups) != 251 {
				b.Fatalf("snapshot has %d cgroups, want 251", len(first.Cgroups))
			}
			var before, after unix.Rusage
			unix.Getrusage(unix.RUSAGE_SELF, &before)
			b.ResetTimer()
			for b.Loop() {
				snapper.Snapshot(ctx, time.Now())
			}
			b.StopTimer()
			unix.Getrusage(unix.RUSAGE_SELF, &after)
			cpu := time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) / time.Duration(b.N)
			b.ReportMetric(float64(cpu.Nanoseconds()), "cpu-ns/op")
		})
	}
}

// TestRemoveRacingSnapshotNeverBreaksAReading races Remove, as the kernel
// event goroutine calls it on cgroup_rmdir, against Snapshot reading the
// same cgroups. A reading that overlaps a Remove must still be a reading
// of the cgroup it names: not EBADF from a closed descriptor, and not the
// content of another file that took the descriptor's number (the remover
// opens files right after each Remove to make that likely). The cgroups
// themselves stay, so every cgroup in every snapshot must have read
// cleanly; -race reports the unsynchronised close on its own.
func TestRemoveRacingSnapshotNeverBreaksAReading(t *testing.T) {
	cgtest.RequirePrivileged(t)
	parent := cgtest.New(t)
	layout := parent.Layout()
	const children = 16
	var rels []string
	for i := range children {
		c := parent.Child(t, fmt.Sprintf("c%02d", i))
		for _, d := range c.Dirs() {
			if d.Hierarchy.ID == layout.Memory.ID {
				rels = append(rels, d.Rel)
			}
		}
	}
	// SlowEvery 1: cpu and io pressure files are read on every tick too.
	snapper, err := pressure.New(pressure.Config{Layout: layout, Roots: []string{parent.Rel()}, SlowEvery: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer snapper.Close()
	ctx := t.Context()
	if got := len(snapper.Snapshot(ctx, time.Now()).Cgroups); got != children+1 {
		t.Fatalf("first snapshot has %d cgroups, want %d", got, children+1)
	}

	const rounds = 200 // bounded: each round is one snapshot and 16 removals
	var bad []string
	for round := range rounds {
		done := make(chan []*os.File)
		go func() {
			var opened []*os.File
			for _, rel := range rels {
				snapper.Remove(rel)
				// Take the descriptor numbers Remove may have freed.
				for range 6 {
					if f, err := os.Open("/proc/self/stat"); err == nil {
						opened = append(opened, f)
					}
				}
			}
			done <- opened
		}()
		snap := snapper.Snapshot(ctx, time.Now())
		for _, f := range <-done {
			f.Close()
		}
		for _, c := range snap.Cgroups {
			if c.Err != nil && len(bad) < 5 {
				bad = append(bad, fmt.Sprintf("round %d: %s: %v", round, c.Rel, c.Err))
			}
		}
		for _, rel := range rels {
			snapper.Add(rel)
		}
	}
	if len(bad) > 0 {
		t.Errorf("readings of live cgroups failed while Remove ran:\n%s", strings.Join(bad, "\n"))
	}
	if got := len(snapper.Snapshot(ctx, time.Now()).Cgroups); got != children+1 {
		t.Errorf("after the races a snapshot has %d cgroups, want %d: every cgroup re-added", got, children+1)
	}

	// Retired entries are closed by the next snapshot, not leaked.
	before := openFDs(t)
	for _, rel := range rels {
		snapper.Remove(rel)
	}
	snapper.Snapshot(ctx, time.Now())
	if after := openFDs(t); after > before-children {
		t.Errorf("%d descriptors open after removing %d cgroups and a snapshot, %d before: the removed cgroups' files were not closed", after, children, before)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// memRel is s's path in the memory hierarchy: the snapshot's Rel.
func memRel(s *cgtest.Sandbox) string {
	for _, d := range s.Dirs() {
		if d.Hierarchy.ID == s.Layout().Memory.ID {
			return d.Rel
		}
	}
	return ""
}

// TestColdCgroupsAreReadWhenAskedFor: a cgroup that Config.Hot leaves out
// (a container's, in nodeguard run) is read when it is admitted and then
// only by a snapshot that asks for the cold cgroups (SnapshotCold, what a
// metrics scrape takes), its last reading carried in between, slow ticks
// included; the hot one above it (its pod's) is read on every tick, and
// sees the memory the container takes at once. Snapshot.ColdAt says when
// the cold ones were read.
//
// The cgroups are named as nodeguard run's (cgroupfs driver) and told
// apart by its own rule, kubepods.BeneathPod, under a relative root whose
// parent is itself named as a pod's (an agent run inside a pod): what
// lies above the root must not make the pods beneath it cold.
func TestColdCgroupsAreReadWhenAskedFor(t *testing.T) {
	cgtest.RequirePrivileged(t)
	outer := cgtest.New(t).Child(t, "pod0f1e2d3c-aaaa-bbbb-cccc-000000000001")
	kube := outer.Child(t, "kubepods")
	pod := kube.Child(t, "pod0f1e2d3c-aaaa-bbbb-cccc-000000000002")
	ctr := pod.Child(t, "0a1b2c3d4e5f")
	podRel, ctrRel := memRel(pod), memRel(ctr)
	snapper, err := pressure.New(pressure.Config{Layout: kube.Layout(), Roots: []string{kube.Rel()}, SlowEvery: 3,
		Hot: func(fromRoot string) bool { return !kubepods.BeneathPod(kubepods.Cgroupfs, fromRoot) }})
	if err != nil {
		t.Fatal(err)
	}
	defer snapper.Close()

	base := time.Now()
	at := func(i int) time.Time { return base.Add(time.Duration(i) * time.Second) }
	tick := func(i int, cold bool) (snap *pressure.Snapshot, p, c pressure.Cgroup) {
		t.Helper()
		if cold {
			snap = snapper.SnapshotCold(context.Background(), at(i))
		} else {
			snap = snapper.Snapshot(context.Background(), at(i))
		}
		var ok bool
		if p, ok = find(snap, podRel); !ok || p.Err != nil {
			t.Fatalf("tick %d: pod cgroup %s: found %v, err %v", i, podRel, ok, p.Err)
		}
		if c, ok = find(snap, ctrRel); !ok || c.Err != nil {
			t.Fatalf("tick %d: container cgroup %s: found %v, err %v", i, ctrRel, ok, c.Err)
		}
		return snap, p, c
	}
	if snap, _, c := tick(0, false); !c.MemoryAt.Equal(at(0)) || !snap.ColdAt.IsZero() {
		t.Fatalf("tick 0: the container cgroup admitted and read at %v (want %v), ColdAt %v (want zero: no cold snapshot yet)", c.MemoryAt, at(0), snap.ColdAt)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "NODEGUARD_TEST_HOLD_MIB=48")
	out, _ := cmd.StdoutPipe()
	if err := ctr.Start(t, cmd); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if _, err := out.Read(make([]byte, 6)); err != nil {
		t.Fatalf("holder never got ready: %v", err)
	}

	const held = 40 << 20
	coldAt := 0 // the admission's reading
	for i, cold := range []bool{false, false, false, false, true, false, false} {
		i++
		snap, p, c := tick(i, cold)
		if cold {
			coldAt = i
			if !snap.ColdAt.Equal(at(i)) {
				t.Errorf("tick %d: a cold snapshot's ColdAt %v, want its own time %v", i, snap.ColdAt, at(i))
			}
		}
		if !p.MemoryAt.Equal(at(i)) {
			t.Errorf("tick %d: the hot pod cgroup's memory was read at %v, want this tick's %v", i, p.MemoryAt, at(i))
		}
		if ws := p.Memory.WorkingSet(); ws < held {
			t.Errorf("tick %d: the pod cgroup's working set %d bytes, want the 48 MiB its container holds", i, ws)
		}
		if !c.MemoryAt.Equal(at(coldAt)) {
			t.Errorf("tick %d (slow %v, cold %v): the cold container cgroup's memory was read at %v, want %v", i, i%3 == 0, cold, c.MemoryAt.Sub(base), at(coldAt).Sub(base))
		}
		switch ws := c.Memory.WorkingSet(); {
		case coldAt == 0 && ws >= held:
			t.Errorf("tick %d: the cold container cgroup shows %d bytes before a cold snapshot read it", i, ws)
		case coldAt > 0 && ws < held:
			t.Errorf("tick %d: the cold container cgroup shows %d bytes after the cold snapshot, want the 48 MiB held", i, ws)
		}
	}
}

// TestARescanRetiresACgroupThatVanished: a cold cgroup is not read between
// cold snapshots, so no read tells that it vanished; with its rmdir event
// lost (Remove never called), the next rescan that does not find it drops
// it from the snapshots, and one made again is admitted again.
func TestARescanRetiresACgroupThatVanished(t *testing.T) {
	cgtest.RequirePrivileged(t)
	kube := cgtest.New(t).Child(t, "kubepods")
	pod := kube.Child(t, "pod0f1e2d3c-aaaa-bbbb-cccc-000000000004")
	ctr := pod.Child(t, "0a1b2c3d4e60")
	ctrRel := memRel(ctr)
	snapper, err := pressure.New(pressure.Config{Layout: kube.Layout(), Roots: []string{kube.Rel()}, RescanEvery: time.Minute,
		Hot: func(fromRoot string) bool { return !kubepods.BeneathPod(kubepods.Cgroupfs, fromRoot) }})
	if err != nil {
		t.Fatal(err)
	}
	defer snapper.Close()
	base := time.Now()
	if _, ok := find(snapper.Snapshot(context.Background(), base), ctrRel); !ok {
		t.Fatalf("the container cgroup %s is not in the first snapshot", ctrRel)
	}
	if err := ctr.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, ok := find(snapper.Snapshot(context.Background(), base.Add(time.Second)), ctrRel); !ok {
		t.Fatalf("the removed cold cgroup left the snapshots before a rescan or a cold snapshot: it was read")
	}
	if _, ok := find(snapper.Snapshot(context.Background(), base.Add(2*time.Minute)), ctrRel); ok {
		t.Fatalf("the removed cold cgroup %s is still in the snapshot after a rescan", ctrRel)
	}
	again := pod.Child(t, "0a1b2c3d4e60")
	if _, ok := find(snapper.Snapshot(context.Background(), base.Add(4*time.Minute)), memRel(again)); !ok {
		t.Fatalf("the cgroup made again is not admitted by the next rescan")
	}
}

// A calm snapshot reads the cgroups Config.Calm names (the pods' own) as
// cold ones, not even on slow ticks; an ordinary snapshot in between
// reads them at once; a scrape's (cold) reads them whole, their slow
// figures too once those are SlowEvery ticks old; the cgroups above them
// are read by every snapshot.
func TestCalmSnapshotsLeavePodsToScrapes(t *testing.T) {
	cgtest.RequirePrivileged(t)
	kube := cgtest.New(t).Child(t, "kubepods")
	pod := kube.Child(t, "pod0f1e2d3c-aaaa-bbbb-cccc-000000000003")
	kubeRel, podRel := memRel(kube), memRel(pod)
	snapper, err := pressure.New(pressure.Config{Layout: kube.Layout(), Roots: []string{kube.Rel()}, SlowEvery: 3,
		Hot:  func(fromRoot string) bool { return !kubepods.BeneathPod(kubepods.Cgroupfs, fromRoot) },
		Calm: func(fromRoot string) bool { return kubepods.IsPod(kubepods.Cgroupfs, fromRoot) }})
	if err != nil {
		t.Fatal(err)
	}
	defer snapper.Close()
	base := time.Now()
	at := func(i int) time.Time { return base.Add(time.Duration(i) * time.Second) }
	for i, tc := range []struct {
		mode          string
		memAt, slowAt int // the snapshot whose reading the pod carries
	}{
		{"calm", 0, 0}, // admitted: read whole
		{"calm", 0, 0},
		{"calm", 0, 0},
		{"calm", 0, 0}, // a slow tick
		{"ordinary", 4, 0},
		{"calm", 4, 0},
		{"scrape", 6, 6},   // the slow figures are 5 ticks old
		{"ordinary", 7, 7}, // a slow tick
		{"scrape", 8, 7},   // 1 tick old: usage only
	} {
		var snap *pressure.Snapshot
		switch tc.mode {
		case "calm":
			snap = snapper.SnapshotCalm(context.Background(), at(i))
		case "ordinary":
			snap = snapper.Snapshot(context.Background(), at(i))
		case "scrape":
			snap = snapper.SnapshotCold(context.Background(), at(i))
		}
		p, ok := find(snap, podRel)
		k, ok2 := find(snap, kubeRel)
		if !ok || !ok2 {
			t.Fatalf("snapshot %d: pod %v, kubepods %v", i, ok, ok2)
		}
		if !p.MemoryAt.Equal(at(tc.memAt)) || !p.SlowAt.Equal(at(tc.slowAt)) {
			t.Errorf("snapshot %d (%s): the pod read at %v, its slow figures at %v; want %v and %v", i, tc.mode,
				p.MemoryAt.Sub(base), p.SlowAt.Sub(base), at(tc.memAt).Sub(base), at(tc.slowAt).Sub(base))
		}
		if !k.MemoryAt.Equal(at(i)) {
			t.Errorf("snapshot %d: kubepods read at %v, want this one's %v", i, k.MemoryAt.Sub(base), at(i).Sub(base))
		}
		// kubepods is not calm: its slow figures are read on the slow
		// ticks (every 3rd snapshot that is not a scrape), and a scrape
		// finds them fresh enough.
		if want := at([]int{0, 0, 0, 3, 3, 3, 3, 7, 7}[i]); !k.SlowAt.Equal(want) {
			t.Errorf("snapshot %d (%s): kubepods' slow figures read at %v, want %v", i, tc.mode, k.SlowAt.Sub(base), want.Sub(base))
		}
	}
}
