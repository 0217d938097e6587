package loader

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// RingStats accounts for every record of one ring.
type RingStats struct {
	Ring string `json:"ring"`
	Size int    `json:"size_bytes"`
	// Kernel side, summed over CPUs.
	Submitted     uint64 `json:"submitted"`
	ReserveFailed uint64 `json:"reserve_failed"`
	// User side.
	Read         uint64 `json:"read"`
	Malformed    uint64 `json:"malformed"`
	QueueDropped uint64 `json:"queue_dropped"`
	Delivered    uint64 `json:"delivered"`
	ReadErrors   uint64 `json:"read_errors"`
	LastError    string `json:"last_error,omitempty"`
}

// Lost is every record that the consumer will never see.
func (s RingStats) Lost() uint64 { return s.ReserveFailed + s.Malformed + s.QueueDropped }

// ringCounters mirrors struct ng_ring_counters.
type ringCounters struct {
	Submitted     uint64
	ReserveFailed uint64
}

// Stats reports the accounting of every ring that has a reader.
func (p *Pipeline) Stats() ([]RingStats, error) {
	var out []RingStats
	for _, rr := range p.readers {
		k, err := p.kernelCounters(rr.ring)
		if err != nil {
			return nil, err
		}
		s := RingStats{
			Ring:          rr.ring.String(),
			Size:          rr.rd.BufferSize(),
			Submitted:     k.Submitted,
			ReserveFailed: k.ReserveFailed,
			Read:          rr.read.Load(),
			Malformed:     rr.malformed.Load(),
			QueueDropped:  rr.dropped.Load(),
			Delivered:     rr.delivered.Load(),
			ReadErrors:    rr.readErrs.Load(),
		}
		if e := rr.lastErr.Load(); e != nil {
			s.LastError = *e
		}
		out = append(out, s)
	}
	return out, nil
}

func (p *Pipeline) kernelCounters(r Ring) (ringCounters, error) {
	var per []ringCounters
	if err := p.maps["ring_stats"].Lookup(uint32(r), &per); err != nil {
		return ringCounters{}, fmt.Errorf("read ring_stats[%s]: %w", r, err)
	}
	var sum ringCounters
	for _, c := range per {
		sum.Submitted += c.Submitted
		sum.ReserveFailed += c.ReserveFailed
	}
	return sum, nil
}

// ReclaimStat is the running aggregate of reclaim episodes for one
// (cgroup, type); for kswapd, Cgroup.ID is the NUMA node.
type ReclaimStat struct {
	Cgroup      CgroupKey
	Type        uint32 // event.ReclaimMemcg, ReclaimDirect or ReclaimKswapd
	Episodes    uint64
	Total       time.Duration
	Max         time.Duration
	NrReclaimed uint64
	Emitted     uint64
}

type reclaimKey struct {
	ID          uint64
	HierarchyID uint32
	Type        uint32
}

type reclaimValue struct {
	Episodes    uint64
	TotalNS     uint64
	MaxNS       uint64
	NrReclaimed uint64
	Emitted     uint64
}

// ErrNotLoaded: the family that owns the requested data is not loaded.
var ErrNotLoaded = errors.New("not loaded")

// ReclaimStats reads the in-kernel reclaim aggregates.
func (p *Pipeline) ReclaimStats() ([]ReclaimStat, error) {
	if p.reclaim == nil {
		return nil, fmt.Errorf("read reclaim stats: reclaim family %w", ErrNotLoaded)
	}
	var (
		k   reclaimKey
		v   reclaimValue
		out []ReclaimStat
	)
	it := p.reclaim.Iterate()
	for it.Next(&k, &v) {
		out = append(out, ReclaimStat{
			Cgroup:      CgroupKey{ID: k.ID, HierarchyID: k.HierarchyID},
			Type:        k.Type,
			Episodes:    v.Episodes,
			Total:       time.Duration(v.TotalNS),
			Max:         time.Duration(v.MaxNS),
			NrReclaimed: v.NrReclaimed,
			Emitted:     v.Emitted,
		})
	}
	if err := it.Err(); err != nil {
		return out, fmt.Errorf("read reclaim stats: %w", err)
	}
	return out, nil
}

// forgetDelay keeps the aggregates of a removed cgroup readable for a while
// (a consumer polling every few seconds still sees its final value) before
// the entry is freed for the cgroups that come next.
const forgetDelay = 30 * time.Second

type forgetQueue struct {
	mu    sync.Mutex
	items []forgetItem
}

type forgetItem struct {
	key CgroupKey
	at  time.Time
}

func (p *Pipeline) forgetLater(k CgroupKey) {
	p.forget.mu.Lock()
	p.forget.items = append(p.forget.items, forgetItem{key: k, at: time.Now()})
	p.forget.mu.Unlock()
}

// janitor frees reclaim_stats entries of removed cgroups, forgetDelay
// after their rmdir event, so that their room goes to live cgroups. It
// only sees the rmdir events the lifecycle ring delivered; the map being
// an LRU hash is what keeps the entries of the others from filling it.
func (p *Pipeline) janitor(ctx context.Context) {
	t := time.NewTicker(forgetDelay / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			p.forget.mu.Lock()
			var keep []forgetItem
			for _, it := range p.forget.items {
				if now.Sub(it.at) < forgetDelay {
					keep = append(keep, it)
					continue
				}
				for _, typ := range []uint32{1, 2} {
					_ = p.reclaim.Delete(reclaimKey{ID: it.key.ID, HierarchyID: it.key.HierarchyID, Type: typ})
				}
			}
			p.forget.items = keep
			p.forget.mu.Unlock()
		}
	}
}
