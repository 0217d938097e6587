// The run loop: one pass a tick (or a kick) relists the runtime, hands pods
// to their workers, removes orphans and runs the periodic jobs.

package lifecycle

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
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

// relist is the kubelet's PLEG in one pass: every container and sandbox
// of nodeguard's with its state, compared with the previous relist; the
// pod of every container or sandbox that changed state, appeared or
// vanished is poked, so a steady pod's crash, or its sandbox stopping
// under running containers, is handled within a Resync, not at its next
// (slow) resync.
func (m *Manager) relist(ctx context.Context) {
	cctx, cancel := call(ctx)
	defer cancel()
	ctrs, err := m.cfg.Runtime.Relist(cctx)
	if err != nil {
		return // the pods' own syncs report runtime trouble
	}
	sbs, sbErr := m.cfg.Runtime.RelistSandboxes(cctx)
	now := make(map[relistKey]relistEntry, len(ctrs)+len(sbs))
	for _, c := range ctrs {
		now[relistKey{id: c.ID}] = relistEntry{uid: types.UID(c.PodUID), state: int32(c.State)}
	}
	if sbErr != nil {
		// The containers are compared all the same; the sandboxes keep
		// their last states until a listing works.
		m.log.Warn("relist: list the pod sandboxes", "err", sbErr)
		for k, e := range m.relisted {
			if k.sandbox {
				now[k] = e
			}
		}
	}
	for _, sb := range sbs {
		now[relistKey{id: sb.ID, sandbox: true}] = relistEntry{uid: types.UID(sb.PodUID), state: int32(sb.State)}
	}
	changed := map[types.UID]bool{}
	for k, e := range now {
		if prev, ok := m.relisted[k]; !ok || prev.state != e.state {
			changed[e.uid] = true
		}
	}
	for k, prev := range m.relisted {
		if _, ok := now[k]; !ok {
			changed[prev.uid] = true
		}
	}
	first := m.relisted == nil
	m.relisted = now
	m.mu.Lock()
	defer m.mu.Unlock()
	// A container or sandbox of a pod nobody wants: its sandbox is an
	// orphan for the next pass to list (orphans.go), on the first relist
	// too (a restarted nodeguard's leftovers).
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

// relistKey names a container, or a sandbox, in a relist.
type relistKey struct {
	id      string
	sandbox bool
}

// relistEntry is what a relist compares: the pod, and the container's
// runtimeapi.ContainerState or the sandbox's PodSandboxState.
type relistEntry struct {
	uid   types.UID
	state int32
}
