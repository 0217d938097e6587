package nodestats

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/cgroups/cgstat"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func TestSignalNamesAreTheKubelets(t *testing.T) {
	// The strings operators write in --eviction-hard; a rename here would
	// silently stop matching their thresholds.
	want := map[Signal]string{
		SignalMemoryAvailable:            "memory.available",
		SignalAllocatableMemoryAvailable: "allocatableMemory.available",
		SignalNodeFsAvailable:            "nodefs.available",
		SignalNodeFsInodesFree:           "nodefs.inodesFree",
		SignalImageFsAvailable:           "imagefs.available",
		SignalImageFsInodesFree:          "imagefs.inodesFree",
		SignalPIDAvailable:               "pid.available",
	}
	for s, name := range want {
		if string(s) != name {
			t.Errorf("%q, want %q", s, name)
		}
	}
}

func TestSignalMathMatchesHandComputedValues(t *testing.T) {
	// From the fixtures (the cgroup ones in cgroups/cgstat/testdata):
	// MemTotal 24683652 kB; v1 root usage 706211840,
	// total_inactive_file 253878272; kubepods (v2) memory.current
	// 2415919104, inactive_file 805306368, memory.max 20401094656;
	// pid_max 32768, threads-max 192729, 112 tasks.
	const memTotal = 24683652 * 1024 // 25276059648
	tests := []struct {
		name string
		got  Observation
		want Observation
	}{
		{
			name: "memory.available is MemTotal minus the v1 root working set",
			got:  MemoryAvailable(memTotal, cgstat.CgroupMemory{Usage: 706211840, InactiveFile: 253878272}, t0),
			want: Observation{SignalMemoryAvailable, 25276059648 - 452333568, 25276059648, t0},
		},
		{
			name: "memory.available is MemTotal minus the v2 root's anon + file - inactive_file",
			got:  MemoryAvailable(memTotal, cgstat.CgroupMemory{Usage: 4294967296, InactiveFile: 2147483648}, t0),
			want: Observation{SignalMemoryAvailable, 25276059648 - 2147483648, 25276059648, t0},
		},
		{
			name: "a working set floored at zero leaves all of MemTotal available",
			got:  MemoryAvailable(memTotal, cgstat.CgroupMemory{Usage: 100, InactiveFile: 200}, t0),
			want: Observation{SignalMemoryAvailable, 25276059648, 25276059648, t0},
		},
		{
			name: "memory.available goes negative, not to zero, when the working set exceeds MemTotal",
			got:  MemoryAvailable(1000, cgstat.CgroupMemory{Usage: 3000, InactiveFile: 1000}, t0),
			want: Observation{SignalMemoryAvailable, -1000, 1000, t0},
		},
		{
			name: "nodefs.available is f_bavail bytes of f_blocks bytes",
			got:  FSAvailable(SignalNodeFsAvailable, FSStats{CapacityBytes: 100 << 30, FreeBytes: 12 << 30, AvailableBytes: 10 << 30}, t0),
			want: Observation{SignalNodeFsAvailable, 10 << 30, 100 << 30, t0},
		},
		{
			name: "imagefs.inodesFree is f_ffree of f_files",
			got:  FSInodesFree(SignalImageFsInodesFree, FSStats{Inodes: 6553600, InodesFree: 6000000}, t0),
			want: Observation{SignalImageFsInodesFree, 6000000, 6553600, t0},
		},
		{
			name: "a filesystem without an inode limit observes zero of zero inodes",
			got:  FSInodesFree(SignalNodeFsInodesFree, FSStats{CapacityBytes: 1 << 30}, t0),
			want: Observation{SignalNodeFsInodesFree, 0, 0, t0},
		},
		{
			name: "pid.available is the smaller limit minus the tasks in existence",
			got:  PIDAvailable(PIDStats{PIDMax: 32768, ThreadsMax: 192729, Running: 112}, t0),
			want: Observation{SignalPIDAvailable, 32768 - 112, 32768, t0},
		},
		{
			name: "pid.available uses threads-max when it is the smaller limit",
			got:  PIDAvailable(PIDStats{PIDMax: 4194304, ThreadsMax: 192729, Running: 1000}, t0),
			want: Observation{SignalPIDAvailable, 192729 - 1000, 192729, t0},
		},
		{
			name: "pid.available goes negative, not to zero, past the limit",
			got:  PIDAvailable(PIDStats{PIDMax: 100, ThreadsMax: 200, Running: 150}, t0),
			want: Observation{SignalPIDAvailable, -50, 100, t0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %+v, want %+v", tt.got, tt.want)
			}
		})
	}
}

func TestAllocatableMemoryAvailable(t *testing.T) {
	pods := cgstat.CgroupMemory{Usage: 2415919104, InactiveFile: 805306368} // working set 1610612736
	tests := []struct {
		name   string
		limit  uint64
		pods   cgstat.CgroupMemory
		want   Observation
		wantOK bool
	}{
		{
			name:   "allocatable minus the pod cgroup root's working set",
			limit:  20401094656,
			pods:   pods,
			want:   Observation{SignalAllocatableMemoryAvailable, 20401094656 - 1610612736, 20401094656, t0},
			wantOK: true,
		},
		{
			name:   "pods over allocatable observe a negative availability",
			limit:  1 << 30,
			pods:   pods,
			want:   Observation{SignalAllocatableMemoryAvailable, 1<<30 - 1610612736, 1 << 30, t0},
			wantOK: true,
		},
		{
			name:   "a working set floored at zero leaves all of allocatable",
			limit:  1 << 30,
			pods:   cgstat.CgroupMemory{Usage: 1, InactiveFile: 2},
			want:   Observation{SignalAllocatableMemoryAvailable, 1 << 30, 1 << 30, t0},
			wantOK: true,
		},
		{
			name:   "a limit of exactly 2^62 is still a limit",
			limit:  1 << 62,
			pods:   pods,
			want:   Observation{SignalAllocatableMemoryAvailable, 1<<62 - 1610612736, 1 << 62, t0},
			wantOK: true,
		},
		{
			name:  "a v1 unlimited limit (page-rounded MaxInt64) gives no observation",
			limit: 9223372036854771712,
			pods:  pods,
		},
		{
			name:  "a limit just above 2^62 gives no observation",
			limit: 1<<62 + 1,
			pods:  pods,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := AllocatableMemoryAvailable(tt.limit, tt.pods, t0)
			if ok != tt.wantOK || got != tt.want {
				t.Errorf("got %+v, %v; want %+v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestAppendObservations(t *testing.T) {
	mi, err := ReadMeminfo(filepath.Join("testdata", "meminfo"))
	if err != nil {
		t.Fatal(err)
	}
	root := cgstat.CgroupMemory{Usage: 706211840, InactiveFile: 253878272}
	pods := cgstat.CgroupMemory{Usage: 2415919104, InactiveFile: 805306368}
	nodefs := FSStats{CapacityBytes: 100, AvailableBytes: 40, Inodes: 10, InodesFree: 4}
	imagefs := FSStats{CapacityBytes: 200, AvailableBytes: 50, Inodes: 20, InodesFree: 5}
	pids := PIDStats{PIDMax: 32768, ThreadsMax: 192729, Running: 112}
	signals := func(obs []Observation) []Signal {
		var s []Signal
		for _, o := range obs {
			if !o.Time.Equal(t0) {
				t.Errorf("%s stamped %v, want %v", o.Signal, o.Time, t0)
			}
			s = append(s, o.Signal)
		}
		return s
	}
	tests := []struct {
		name string
		in   Inputs
		want []Signal
	}{
		{
			name: "full inputs give all seven signals in the fixed order",
			in:   Inputs{Meminfo: &mi, Root: &root, Pods: &pods, PodsLimit: 20401094656, NodeFS: &nodefs, ImageFS: &imagefs, PIDs: &pids},
			want: []Signal{SignalMemoryAvailable, SignalAllocatableMemoryAvailable, SignalNodeFsAvailable, SignalNodeFsInodesFree, SignalImageFsAvailable, SignalImageFsInodesFree, SignalPIDAvailable},
		},
		{
			name: "memory.available needs both meminfo and the root cgroup",
			in:   Inputs{Meminfo: &mi, NodeFS: &nodefs},
			want: []Signal{SignalNodeFsAvailable, SignalNodeFsInodesFree},
		},
		{
			name: "an unlimited pod cgroup root leaves allocatableMemory.available out",
			in:   Inputs{Meminfo: &mi, Root: &root, Pods: &pods, PodsLimit: 1 << 63, PIDs: &pids},
			want: []Signal{SignalMemoryAvailable, SignalPIDAvailable},
		},
		{
			name: "no inputs give no observations",
			in:   Inputs{},
			want: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := signals(AppendObservations(nil, tt.in, t0))
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}

	full := Inputs{Meminfo: &mi, Root: &root, Pods: &pods, PodsLimit: 20401094656, NodeFS: &nodefs, ImageFS: &imagefs, PIDs: &pids}
	obs := AppendObservations(nil, full, t0)
	if obs[0] != MemoryAvailable(mi.MemTotal, root, t0) || obs[5] != (Observation{SignalImageFsInodesFree, 5, 20, t0}) {
		t.Errorf("observations disagree with the single-signal functions: %+v", obs)
	}
	buf := make([]Observation, 0, 7)
	if n := testing.AllocsPerRun(100, func() { buf = AppendObservations(buf[:0], full, t0) }); n != 0 {
		t.Errorf("AppendObservations into a roomy slice allocates %v times", n)
	}
}
