package agent

import (
	"sync"

	"github.com/nodeguard/nodeguard/eviction"
)

// decisionRelay passes the pod manager's local-storage evictions to the
// eviction observer (metrics, the event log), which exists only once
// sensing has started, after the pod manager. Decisions made before are
// kept, up to earlyDecisions, and passed on when it is bound.
type decisionRelay struct {
	mu    sync.Mutex
	to    *evictionObserver
	early []earlyDecision
	lost  int
}

type earlyDecision struct {
	d eviction.Decision
	t eviction.Timing
}

// earlyDecisions bounds what is kept before binding: one per pod of a
// full node (maxPods 110) is more than a first pass can decide.
const earlyDecisions = 128

// OnDecision implements lifecycle.LocalStorageConfig.Observer.
func (r *decisionRelay) OnDecision(d eviction.Decision, t eviction.Timing) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.to != nil {
		r.to.OnDecision(d, t)
		return
	}
	if len(r.early) == earlyDecisions {
		r.lost++
		return
	}
	r.early = append(r.early, earlyDecision{d, t})
}

// bind passes on what was kept and everything that follows; it reports
// how many decisions did not fit.
func (r *decisionRelay) bind(o *evictionObserver) (lost int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.early {
		o.OnDecision(e.d, e.t)
	}
	r.to, r.early = o, nil
	return r.lost
}
