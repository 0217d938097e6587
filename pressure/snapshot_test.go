package pressure_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
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
