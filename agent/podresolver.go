// Pod labels for the cgroup series of the metrics.

package agent

import (
	"sync"
	"time"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/metrics"
	"github.com/nodeguard/nodeguard/pressure"
)

// podResolver labels cgroup series with their pod.
type podResolver struct {
	mgr    *lifecycle.Manager
	cgm    *kubepods.Cgroups
	layout *cgroups.Layout

	mu    sync.Mutex
	at    time.Time
	byKey map[pressure.CgroupKey]metrics.PodLabels
}

func newPodResolver(mgr *lifecycle.Manager, cgm *kubepods.Cgroups, layout *cgroups.Layout) *podResolver {
	return &podResolver{mgr: mgr, cgm: cgm, layout: layout}
}

func (r *podResolver) PodLabels(k pressure.CgroupKey) (metrics.PodLabels, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.at) > 2*time.Second {
		r.byKey = map[pressure.CgroupKey]metrics.PodLabels{}
		for _, p := range r.mgr.List() {
			parent, err := r.cgm.Parent(p)
			if err != nil {
				continue
			}
			dirs, err := r.cgm.Dirs(parent)
			if err != nil {
				continue
			}
			for _, d := range dirs {
				if d.Hierarchy.ID != r.layout.Memory.ID {
					continue
				}
				if id, err := cgroups.ID(d.Path); err == nil {
					r.byKey[pressure.CgroupKey{ID: id, HierarchyID: d.Hierarchy.ID}] = metrics.PodLabels{
						Namespace: p.Namespace, Pod: p.Name, UID: string(p.UID), QOS: string(p.Status.QOSClass)}
				}
			}
		}
		r.at = time.Now()
	}
	l, ok := r.byKey[k]
	return l, ok
}
