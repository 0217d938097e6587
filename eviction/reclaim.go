package eviction

import (
	"context"
	"time"

	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// Bounds of node-level reclaim.
const (
	// DefaultReclaimTimeout bounds one node-level reclaim: removing dead
	// containers and unused images takes milliseconds to seconds per
	// object through the CRI; a runtime stuck longer must not hold the
	// evaluation loop, which also serves memory.
	DefaultReclaimTimeout = 30 * time.Second
	// DefaultReclaimInterval: after a reclaim that did not relieve the
	// node, the next disk decisions evict without reclaiming again for
	// this long (the kubelet reclaims at most once per 10 s
	// housekeeping), so that sustained disk pressure does not list every
	// image once a second.
	DefaultReclaimInterval = 10 * time.Second
)

// reclaimFirst is the kubelet's reclaimNodeLevelResources for a disk
// decision: reclaim at node level, take a fresh snapshot, and report
// whether every disk threshold is now unmet with its minimum reclaim
// added (grace periods ignored): then the decision is dropped and no pod
// is evicted. Unlike the kubelet, memory and PID thresholds do not keep a
// disk eviction going: the policy decides for each resource on its own.
// Dry run reclaims nothing.
func (m *Manager) reclaimFirst(ctx context.Context, d Decision) bool {
	if m.cfg.Reclaim == nil || d.Resource != ResourceDisk || d.DryRun {
		return false
	}
	start := m.now()
	if !m.lastReclaim.IsZero() && start.Sub(m.lastReclaim) < DefaultReclaimInterval {
		return false
	}
	m.lastReclaim = start
	rctx, cancel := context.WithTimeout(ctx, DefaultReclaimTimeout)
	ran, err := m.cfg.Reclaim.ReclaimNode(rctx, nodestats.Signal(d.Signal))
	cancel()
	if err != nil {
		// What could be freed was; the fresh snapshot says whether it was
		// enough.
		m.log.Warn("eviction manager: node-level reclaim", "signal", d.Signal, "err", err)
	}
	if !ran {
		return false
	}
	snap, err := m.cfg.Snapshot(ctx)
	if err != nil || snap == nil {
		m.log.Warn("eviction manager: no snapshot after node-level reclaim; evicting", "signal", d.Signal, "err", err)
		return false
	}
	signals := make(map[nodestats.Signal]nodestats.Observation, len(snap.Signals))
	for _, o := range snap.Signals {
		signals[o.Signal] = o
	}
	if still := m.policy.diskThresholdsMet(signals); len(still) > 0 {
		m.log.Info("eviction manager: node-level reclaim was not enough; evicting", "signal", d.Signal,
			"still_met", still, "took", m.now().Sub(start))
		return false
	}
	m.lastReclaim = time.Time{} // it worked: reclaim first next time too
	m.policy.Forget(d.Victim.UID)
	m.log.Info("eviction manager: node-level reclaim relieved disk pressure; no pod evicted", "signal", d.Signal,
		"threshold", d.Threshold, "observed", d.Observed, "spared", d.Victim.Namespace+"/"+d.Victim.Name,
		"took", m.now().Sub(start))
	return true
}

// diskThresholdsMet returns the disk thresholds that signals meet with
// their minimum reclaim added, grace periods ignored (the kubelet's
// thresholdsMet(..., enforceMinReclaim=true) after a node-level reclaim).
func (p *Policy) diskThresholdsMet(signals map[nodestats.Signal]nodestats.Observation) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var met []string
	for i := range p.cfg.Thresholds {
		t := &p.cfg.Thresholds[i]
		if signalInfos[t.Signal].resource != ResourceDisk {
			continue
		}
		o, ok := signals[t.Signal]
		if !ok {
			continue
		}
		limit := t.Value.Amount(o.Capacity)
		if t.MinReclaim != nil {
			limit += t.MinReclaim.Amount(o.Capacity)
		}
		if o.Available < limit {
			met = append(met, t.String())
		}
	}
	return met
}
