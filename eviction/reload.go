package eviction

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/pressure/nodestats"
	"github.com/nodeguard/nodeguard/psi"
)

// SetPolicy replaces the policy's configuration while the manager runs (a
// configuration reload) and asks for an evaluation under it. An invalid
// cfg is an error and changes nothing.
//
// The Policy keeps its identity (Policy() returns the same value, so an
// admission hook bound to it follows) and the state that does not depend
// on the configuration: victims pending release (so a reload in the middle
// of an eviction does not evict a second pod for the same pressure), node
// conditions and their last sightings (no flap of MemoryPressure), and the
// time of the last decision per resource (cool-down). See
// Policy.Reconfigure for what happens to each threshold and PSI rule.
//
// DryRun is the manager's, set at NewManager, and not changed here: the
// manager's oom_score_adj handling follows it too, so a change needs a new
// manager.
func (m *Manager) SetPolicy(cfg PolicyConfig) error {
	cfg.DryRun = m.cfg.DryRun
	if err := m.policy.Reconfigure(cfg); err != nil {
		return fmt.Errorf("set policy: %w", err)
	}
	m.Wake("reconfigured", time.Time{})
	return nil
}

// thresholdKey identifies a threshold across a reconfiguration: its signal
// and whether it is hard. A threshold whose value or grace period changed
// is the same threshold with new numbers.
type thresholdKey struct {
	signal nodestats.Signal
	hard   bool
}

// psiRuleKey identifies a PSI rule across a reconfiguration: what it
// measures, not its level or duration.
type psiRuleKey struct {
	pod      bool
	resource psi.Resource
	full     bool
	window   time.Duration
}

// Reconfigure validates cfg and makes it the policy's configuration, as
// NewPolicy would (defaults applied), keeping what the policy learnt:
//
//   - a threshold with the same signal and kind (hard or soft) as an old
//     one keeps when it was first met and whether it is latched for its
//     minimum reclaim: a soft threshold that has been met for 20 s of its
//     30 s grace period does not start over because an unrelated threshold
//     changed. The next evaluation checks it against its new value and
//     clears it if it is no longer met;
//   - a PSI rule over the same signal (pod or node, resource, some or full,
//     window) keeps since when its level was exceeded, node-wide and per
//     pod, on the same terms;
//   - victims pending release, node conditions and cool-down times are
//     kept as they are;
//   - thresholds and rules that are new start with no history; those
//     removed are forgotten.
//
// On error nothing changes.
func (p *Policy) Reconfigure(cfg PolicyConfig) error {
	fresh, err := NewPolicy(cfg)
	if err != nil {
		return fmt.Errorf("reconfigure: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	oldTh := map[thresholdKey]int{}
	for i, t := range p.cfg.Thresholds {
		oldTh[thresholdKey{t.Signal, t.Hard()}] = i
	}
	for i, t := range fresh.cfg.Thresholds {
		if j, ok := oldTh[thresholdKey{t.Signal, t.Hard()}]; ok {
			fresh.firstMet[i], fresh.latched[i] = p.firstMet[j], p.latched[j]
		}
	}
	oldPSI := map[psiRuleKey]int{}
	for i, r := range p.cfg.PSIRules {
		oldPSI[psiRuleKey{r.Pod, r.Resource, r.Full, r.Window}] = i
	}
	for i, r := range fresh.cfg.PSIRules {
		if j, ok := oldPSI[psiRuleKey{r.Pod, r.Resource, r.Full, r.Window}]; ok {
			fresh.psiSince[i] = p.psiSince[j]
			fresh.podPSISince[i] = make(map[types.UID]time.Time, len(p.podPSISince[j]))
			for uid, t := range p.podPSISince[j] {
				fresh.podPSISince[i][uid] = t
			}
		}
	}
	p.cfg = fresh.cfg
	p.firstMet, p.latched = fresh.firstMet, fresh.latched
	p.psiSince, p.podPSISince = fresh.psiSince, fresh.podPSISince
	return nil
}
