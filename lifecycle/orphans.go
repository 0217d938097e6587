package lifecycle

import (
	"context"
	"os"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// orphanScanPasses: the sandboxes are listed for orphans at least every
// this many Run passes (10 s at the default Resync), as the kubelet's
// housekeeping, besides when something says there may be one: the
// sources' first load, a relisted container or sandbox whose pod is not
// desired (relist). Listing 250 sandboxes whole every pass was a tenth
// of the run loop's CPU.
const orphanScanPasses = 10

// removeOrphans finds nodeguard's sandboxes whose pod is not desired (only
// once every source was loaded: a restarted nodeguard adopts; and never
// one whose source could not be loaded, sources.go) and hands
// each such pod's to a worker, on wg: their containers' grace period must
// not hold up the Run loop, whose passes are the relist and the watchdog's
// heartbeat. A pod whose orphans are already being torn down is left to
// that worker, however often the listing sees them again.
func (m *Manager) removeOrphans(ctx context.Context, wg *sync.WaitGroup) {
	if !m.sourcesReady.Load() {
		return
	}
	m.orphanPasses++
	if !m.orphanScan.Swap(false) && m.orphanPasses < orphanScanPasses {
		return
	}
	m.orphanPasses = 0
	cctx, cancel := call(ctx)
	sandboxes, err := m.cfg.Runtime.ListPodSandbox(cctx, map[string]string{cri.ManagedLabel: "true"})
	cancel()
	if err != nil {
		m.log.Warn("list sandboxes", "err", err)
		m.orphanScan.Store(true) // again at the next pass
		return
	}
	byPod := map[types.UID][]*runtimeapi.PodSandbox{}
	kept := map[types.UID]keptSandbox{}
	m.mu.Lock()
	for _, sb := range sandboxes {
		uid := types.UID(sb.GetMetadata().GetUid())
		if _, desired := m.pods[uid]; desired || m.orphans[uid] {
			continue
		}
		if why := m.unavailable.why(sb); why != nil {
			// Its source could not be loaded: not an orphan.
			kept[uid] = keptSandbox{sb: sb, why: why}
			continue
		}
		byPod[uid] = append(byPod[uid], sb)
	}
	for uid := range byPod {
		m.orphans[uid] = true
	}
	m.mu.Unlock()
	m.tellKept(kept)
	m.removeStaleHostsFiles(sandboxes)
	for uid, sbs := range byPod {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.teardownOrphans(ctx, uid, sbs)
		}()
	}
}

// teardownOrphans tears down the orphaned sandboxes of pod uid and, unless
// the pod was applied again meanwhile, its cgroups and volumes. Until it
// returns the Run loop starts no worker for uid, so the two never race for
// the pod's sandbox, cgroup or volumes.
func (m *Manager) teardownOrphans(ctx context.Context, uid types.UID, sbs []*runtimeapi.PodSandbox) {
	m.slots.acquire()
	for _, sb := range sbs {
		m.teardownSandbox(ctx, sb.Id, sb.GetAnnotations()[AnnotationCgroupParent], orphanGrace, true)
	}
	m.mu.Lock()
	_, desired := m.pods[uid]
	m.mu.Unlock()
	if !desired {
		for _, sb := range sbs {
			if parent := sb.GetAnnotations()[AnnotationCgroupParent]; parent != "" {
				m.removePodCgroup(ctx, parent, true)
			}
		}
		if err := m.teardownVolumes(ctx, uid); err != nil {
			m.log.Warn("remove volumes of an orphaned sandbox", "uid", uid, "err", err)
		}
		_ = os.Remove(m.hostsPath(uid))
	}
	m.slots.release()
	m.mu.Lock()
	delete(m.orphans, uid)
	m.mu.Unlock()
	m.poke() // a pod of this UID applied meanwhile gets its worker now
}
