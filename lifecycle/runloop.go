// The run loop: one pass a tick (or a kick) relists the runtime, hands pods
// to their workers, removes orphans and runs the periodic jobs.

package lifecycle

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Run reconciles until ctx is done. Every pod has its own worker (as the
// kubelet's pod workers): a new or changed pod is synced at once, not at the
// next round, and a slow pod delays no other. At most Config.Workers pods
// talk to the runtime at a time; their containers waiting out a grace
// period are not counted there (slots.go). Run itself starts the workers
// of new pods and of the teardown of sandboxes nobody wants (orphans.go).
func (m *Manager) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.Resync)
	defer t.Stop()
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		// The probe workers end with ctx; after the pod workers, so that
		// none starts another.
		m.probes.Stop()
		if err := m.closeProbes(); err != nil {
			m.log.Warn("close the probes' network namespace", "err", err)
		}
	}()
	wg.Go(func() { m.rotator.Run(ctx) })
	for {
		m.beat.Store(m.now().UnixNano())
		m.mu.Lock()
		for uid, st := range m.pods {
			// A pod whose UID's orphaned sandboxes are being torn down
			// waits for its worker until they are gone (orphans.go).
			if !st.working && !m.orphans[uid] {
				st.working = true
				wg.Add(1)
				go func() {
					defer wg.Done()
					m.podWorker(ctx, uid, st)
				}()
			}
		}
		m.mu.Unlock()
		m.removeOrphans(ctx, &wg)
		m.relist(ctx)
		m.maybeGC(ctx, &wg)
		m.maybeCheckLocalStorage(ctx, &wg)
		if err := m.cfg.Cgroups.UpdateQOS(ctx, m.desiredPods()); err != nil && err.Error() != m.qosErr {
			m.log.Warn("QoS cgroups' cpu shares", "err", err)
			m.qosErr = err.Error()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.kick:
		}
	}
}

// SteadyResyncFactor: a pod whose containers all run is synced every
// this many Resyncs; the relist catches state changes in between.
const SteadyResyncFactor = 15

// relist is the kubelet's PLEG in one call: every container of
// nodeguard's with its state, compared with the previous relist; the pod
// of every container that changed state, appeared or vanished is poked,
// so a steady pod's crash is handled within a Resync, not at its next
// (slow) resync.
func (m *Manager) relist(ctx context.Context) {
	cctx, cancel := call(ctx)
	ctrs, err := m.cfg.Runtime.Relist(cctx)
	cancel()
	if err != nil {
		return // the pods' own syncs report runtime trouble
	}
	now := make(map[string]relistEntry, len(ctrs))
	changed := map[types.UID]bool{}
	for _, c := range ctrs {
		uid := types.UID(c.PodUID)
		now[c.ID] = relistEntry{uid: uid, state: c.State}
		if prev, ok := m.relisted[c.ID]; !ok || prev.state != c.State {
			changed[uid] = true
		}
	}
	for id, prev := range m.relisted {
		if _, ok := now[id]; !ok {
			changed[prev.uid] = true
		}
	}
	first := m.relisted == nil
	m.relisted = now
	m.mu.Lock()
	defer m.mu.Unlock()
	// A container of a pod nobody wants: its sandbox is an orphan for the
	// next pass to list (orphans.go), on the first relist too (a restarted
	// nodeguard's leftovers).
	for _, e := range now {
		if _, desired := m.pods[e.uid]; !desired && !m.orphans[e.uid] {
			m.orphanScan.Store(true)
			break
		}
	}
	if first {
		return
	}
	for uid := range changed {
		if st, ok := m.pods[uid]; ok {
			st.poke()
		}
	}
}

type relistEntry struct {
	uid   types.UID
	state runtimeapi.ContainerState
}
