package eviction

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/pressure"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// diskNode is a node whose image filesystem (100 GiB) has avail bytes
// available until a node-level reclaim raises it to freeTo.
type diskNode struct {
	mu       sync.Mutex
	signal   nodestats.Signal
	avail    int64
	freeTo   int64
	noFuncs  bool // the signal has no reclaim functions
	reclaims []nodestats.Signal
}

func (n *diskNode) snapshot(context.Context) (*pressure.Snapshot, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Now()
	return &pressure.Snapshot{
		Time:    now,
		Signals: []nodestats.Observation{{Signal: n.signal, Available: n.avail, Capacity: 100 * Gi, Time: now}},
		Cgroups: []pressure.Cgroup{cgroup("/kubepods/pod-a", 11, 100*Mi)},
	}, nil
}

func (n *diskNode) ReclaimNode(_ context.Context, sig nodestats.Signal) (bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.reclaims = append(n.reclaims, sig)
	if n.noFuncs {
		return false, nil
	}
	n.avail = n.freeTo
	return true, nil
}

func (n *diskNode) reclaimed() []nodestats.Signal {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.reclaims)
}

func TestManagerReclaimsAtNodeLevelBeforeADiskEviction(t *testing.T) {
	for _, tc := range []struct {
		name       string
		signal     nodestats.Signal
		minReclaim string // of imagefs.available
		freeTo     int64
		noFuncs    bool
		dryRun     bool
		evicted    bool
		reclaimed  bool
	}{
		{name: "reclaim frees enough and no pod is evicted", signal: nodestats.SignalImageFsAvailable,
			freeTo: 50 * Gi, reclaimed: true},
		{name: "reclaim frees too little and the pod is evicted", signal: nodestats.SignalImageFsAvailable,
			freeTo: 12 * Gi, reclaimed: true, evicted: true},
		{name: "reclaim above the threshold but short of the minimum reclaim still evicts", signal: nodestats.SignalImageFsAvailable,
			minReclaim: "10Gi", freeTo: 20 * Gi, reclaimed: true, evicted: true},
		{name: "a signal without reclaim functions evicts at once", signal: nodestats.SignalNodeFsAvailable,
			noFuncs: true, reclaimed: true, evicted: true},
		{name: "dry run reclaims nothing", signal: nodestats.SignalImageFsAvailable,
			freeTo: 50 * Gi, dryRun: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := &diskNode{signal: tc.signal, avail: 10 * Gi, freeTo: tc.freeTo, noFuncs: tc.noFuncs}
			th := ThresholdConfig{EvictionHard: map[string]string{string(tc.signal): "15%"}}
			if tc.minReclaim != "" {
				th.EvictionMinimumReclaim = map[string]string{string(tc.signal): tc.minReclaim}
			}
			h := startManager(t, th, func(c *ManagerConfig) {
				c.Snapshot, c.Reclaim, c.DryRun = node.snapshot, node, tc.dryRun
			})
			h.actor.setPods(ref(pod("a", 0, 100*Mi), "/kubepods/pod-a"))
			before := h.m.Evaluations()
			h.m.Wake("test", time.Now())
			eventually(t, "an evaluation", func() bool { return h.m.Evaluations() > before })

			if got := len(h.actor.evicted()) > 0; got != tc.evicted {
				t.Errorf("evicted %v (%v), want evicted=%v; log:\n%s", got, h.actor.evicted(), tc.evicted, h.logs())
			}
			want := []nodestats.Signal(nil)
			if tc.reclaimed {
				want = []nodestats.Signal{tc.signal}
			}
			if got := node.reclaimed(); !slices.Equal(got, want) {
				t.Errorf("reclaimed for %v, want %v", got, want)
			}
			if !tc.evicted && tc.reclaimed && !strings.Contains(h.logs(), "no pod evicted") {
				t.Errorf("no log line says the reclaim spared the pod:\n%s", h.logs())
			}
		})
	}
}

func TestManagerDoesNotReclaimAgainRightAfterAReclaimThatFellShort(t *testing.T) {
	node := &diskNode{signal: nodestats.SignalImageFsAvailable, avail: 10 * Gi, freeTo: 11 * Gi}
	th := ThresholdConfig{EvictionHard: map[string]string{"imagefs.available": "15%"}}
	h := startManager(t, th, func(c *ManagerConfig) { c.Snapshot, c.Reclaim = node.snapshot, node })
	h.actor.setPods(ref(pod("a", 0, 100*Mi), "/kubepods/pod-a"), ref(pod("b", 0, 100*Mi), "/kubepods/pod-b"))
	for range 3 {
		before := h.m.Evaluations()
		h.m.Policy().Forget("a") // as if a's eviction failed: decide again
		h.m.Policy().Forget("b")
		h.m.Wake("test", time.Now())
		eventually(t, "an evaluation", func() bool { return h.m.Evaluations() > before })
	}
	if got := node.reclaimed(); len(got) != 1 {
		t.Errorf("reclaimed %d times within %v, want once: %v", len(got), DefaultReclaimInterval, got)
	}
}
