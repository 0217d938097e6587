// Garbage collection of what pods that no longer exist left behind
// (volumes, IP leases, veths, network namespaces, cgroups), and of a
// pod's exited containers beyond the last of each.

package lifecycle

import (
	"context"
	"fmt"
	"sync"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// maybeGC starts a collection of volumes and the network in the
// background once every source is loaded, then every GCInterval.
func (m *Manager) maybeGC(ctx context.Context, wg *sync.WaitGroup) {
	if !m.sourcesReady.Load() || m.now().Sub(m.lastGC) < m.cfg.GCInterval || !m.gcRunning.CompareAndSwap(false, true) {
		return
	}
	m.lastGC = m.now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer m.gcRunning.Store(false)
		m.GC(ctx)
	}()
}

// GC collects, once, what pods that no longer exist left behind: volume
// directories and mounts, IP leases, veths and network namespaces, pod
// cgroups. While a source or a persisted record could not be loaded
// (sources.go), volumes and pod cgroups are left alone: what they belong
// to cannot be told from an orphan's (a broken source's pod may have lost
// its sandbox to a reboot and still own its emptyDir data). The network
// is collected by the runtime's live sandboxes, which such pods keep.
func (m *Manager) GC(ctx context.Context) {
	if m.anyUnavailable() {
		m.log.Info("gc: volumes and pod cgroups not collected while a pod source could not be loaded")
	} else {
		if err := m.gcVolumes(ctx); err != nil {
			m.log.Warn("gc", "err", err)
		}
	}
	if err := m.gcNetwork(ctx); err != nil {
		m.log.Warn("gc", "err", err)
	}
	if !m.anyUnavailable() {
		if err := m.gcCgroups(ctx); err != nil {
			m.log.Warn("gc", "err", err)
		}
	}
}

// gcCgroups removes the pod cgroups of pods nobody wants (killing what
// still runs in them): a nodeguard killed between a pod's sandbox removal
// and its cgroup's leaves one that no sandbox names any more. As for
// volumes, the cgroups are listed before the desired pods are read.
func (m *Manager) gcCgroups(ctx context.Context) error {
	parents, err := m.cfg.Cgroups.PodParents()
	if err != nil {
		return fmt.Errorf("cgroup gc: %w", err)
	}
	m.mu.Lock()
	var orphans []string
	for uid, parent := range parents {
		if _, ok := m.pods[uid]; !ok {
			orphans = append(orphans, parent)
		}
	}
	m.mu.Unlock()
	for _, parent := range orphans {
		m.removePodCgroup(ctx, parent, true)
		m.log.Info("cgroup gc: orphaned pod cgroup removed", "cgroup", parent)
	}
	return nil
}

// gc removes exited attempts older than the newest exited one of each
// container (the kubelet keeps one for logs and status).
func (m *Manager) gc(ctx context.Context, parent string, ctrs []*runtimeapi.Container) {
	newest := latest(ctrs)
	for _, c := range ctrs {
		n := c.GetMetadata().GetName()
		if c.State != runtimeapi.ContainerState_CONTAINER_EXITED || newest[n].Id == c.Id {
			continue
		}
		if newest[n].GetMetadata().GetAttempt() > c.GetMetadata().GetAttempt()+1 {
			if err := m.removeContainer(ctx, parent, c.Id); err != nil {
				m.log.Warn("remove old container", "container", c.Id, "err", err)
			}
		}
	}
}
