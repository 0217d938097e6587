package eviction

import (
	"slices"
	"testing"

	"github.com/nodeguard/nodeguard/pressure"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// arms feeds p one snapshot per usage, arming wherever Next says, and
// returns the levels armed.
func arms(p *TripwirePolicy, snaps []*pressure.Snapshot) []uint64 {
	var out []uint64
	for _, s := range snaps {
		if at, ok := p.Next(s); ok {
			out = append(out, at)
			p.Armed(at)
		}
	}
	return out
}

func TestTripwirePolicyNext(t *testing.T) {
	const capacity = 1 << 30
	th := []Threshold{{Signal: nodestats.SignalAllocatableMemoryAvailable, Value: ThresholdValue{Quantity: 100 << 20}}}
	// usages are {usage, inactive_file} of the pod root.
	snap := func(u [2]uint64) *pressure.Snapshot {
		s := &pressure.Snapshot{Signals: []nodestats.Observation{{Signal: nodestats.SignalAllocatableMemoryAvailable, Available: capacity / 2, Capacity: capacity}}}
		s.Node.Pods.Usage, s.Node.Pods.InactiveFile = u[0], u[1]
		return s
	}
	const line = capacity - 100<<20
	tests := []struct {
		name   string
		chase  bool
		usages [][2]uint64
		want   []uint64
	}{
		{"below the line the wire sits at the line", false, [][2]uint64{{256 << 20, 0}}, []uint64{line}},
		{"page cache above the line does not move the working-set wire", false,
			[][2]uint64{{256 << 20, 0}, {line + 64<<20, 96 << 20}, {line + 96<<20, 128 << 20}}, []uint64{line}},
		{"page cache below the line: the v1 or memory.high wire sits at the line", true, [][2]uint64{{line - 8<<20, 64 << 20}}, []uint64{line}},
		// usage past the line by cache, the working set 32 MiB below
		// it: armed where the working set reaches the line, as long as
		// the cache stays (96 MiB above usage), not 1 MiB above usage.
		{"usage past the line by page cache: the wire is where the working set reaches the line", true,
			[][2]uint64{{line + 64<<20, 96 << 20}}, []uint64{line + 96<<20}},
		{"the working set growing under the same cache does not move it", true,
			[][2]uint64{{line + 64<<20, 96 << 20}, {line + 80<<20, 96 << 20}, {line + 95<<20, 96 << 20}}, []uint64{line + 96<<20}},
		{"cache reclaimed: the wire comes down with it", true,
			[][2]uint64{{line + 64<<20, 96 << 20}, {line + 16<<20, 32 << 20}}, []uint64{line + 96<<20, line + 32<<20}},
		{"the working set past the line too: the wire is kept just above usage", true,
			[][2]uint64{{line + 64<<20, 32 << 20}}, []uint64{line + 65<<20}},
		{"moves under 1 MiB are skipped", true,
			[][2]uint64{{line + 64<<20, 0}, {line + 64<<20 + 512<<10, 0}}, []uint64{line + 65<<20}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var snaps []*pressure.Snapshot
			for _, u := range tt.usages {
				snaps = append(snaps, snap(u))
			}
			if got := arms(NewTripwirePolicy(th, tt.chase), snaps); !slices.Equal(got, tt.want) {
				t.Errorf("armed at %v, want %v", got, tt.want)
			}
		})
	}
}

func TestTripwirePolicyLine(t *testing.T) {
	const capacity = 8 << 30
	obs := func(sig nodestats.Signal, avail int64) nodestats.Observation {
		return nodestats.Observation{Signal: sig, Available: avail, Capacity: capacity}
	}
	mem := Threshold{Signal: nodestats.SignalMemoryAvailable, Value: ThresholdValue{Quantity: 100 << 20}}
	alloc := Threshold{Signal: nodestats.SignalAllocatableMemoryAvailable, Value: ThresholdValue{Quantity: 1 << 30}}
	disk := Threshold{Signal: nodestats.SignalNodeFsAvailable, Value: ThresholdValue{Quantity: 1 << 30}}
	for _, tt := range []struct {
		name   string
		th     []Threshold
		obs    []nodestats.Observation
		podsWS uint64 // the pod root's working set
		want   uint64
		ok     bool
	}{
		{"memory.available: the pods' share of capacity minus the threshold",
			// node working set 6 GiB, pods' 4 GiB: 2 GiB are not pods'.
			[]Threshold{mem}, []nodestats.Observation{obs(nodestats.SignalMemoryAvailable, 2<<30)}, 4 << 30,
			capacity - 100<<20 - 2<<30, true},
		{"allocatableMemory.available: allocatable minus the threshold",
			[]Threshold{alloc}, []nodestats.Observation{obs(nodestats.SignalAllocatableMemoryAvailable, 2<<30)}, 4 << 30,
			capacity - 1<<30, true},
		{"the nearest of two lines",
			[]Threshold{mem, alloc}, []nodestats.Observation{obs(nodestats.SignalMemoryAvailable, 2<<30), obs(nodestats.SignalAllocatableMemoryAvailable, 2<<30)}, 4 << 30,
			capacity - 100<<20 - 2<<30, true},
		{"a threshold whose signal is not observed places no line",
			[]Threshold{mem}, nil, 4 << 30, 0, false},
		{"a threshold that is not on memory places no line",
			[]Threshold{disk}, []nodestats.Observation{obs(nodestats.SignalNodeFsAvailable, 2<<30)}, 4 << 30, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &pressure.Snapshot{Signals: tt.obs}
			s.Node.Pods.Usage = tt.podsWS
			got, ok := NewTripwirePolicy(tt.th, false).Line(s)
			if got != tt.want || ok != tt.ok {
				t.Errorf("Line = %d, %v; want %d, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestTripwirePolicySetThresholdsArmsAfresh(t *testing.T) {
	const capacity = 1 << 30
	s := &pressure.Snapshot{Signals: []nodestats.Observation{{Signal: nodestats.SignalAllocatableMemoryAvailable, Available: capacity / 2, Capacity: capacity}}}
	th := []Threshold{{Signal: nodestats.SignalAllocatableMemoryAvailable, Value: ThresholdValue{Quantity: 100 << 20}}}
	p := NewTripwirePolicy(th, false)
	if got := arms(p, []*pressure.Snapshot{s, s}); !slices.Equal(got, []uint64{capacity - 100<<20}) {
		t.Fatalf("armed at %v", got)
	}
	// 512 KiB away: a move Next skips, unless the thresholds were set.
	th[0].Value.Quantity = 100<<20 + 512<<10
	p.SetThresholds(th)
	if got := arms(p, []*pressure.Snapshot{s}); !slices.Equal(got, []uint64{capacity - 100<<20 - 512<<10}) {
		t.Errorf("after SetThresholds armed at %v, want the new line at once", got)
	}
}
