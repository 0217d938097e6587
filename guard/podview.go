package guard

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/evictionapi"
	"github.com/nodeguard/nodeguard/metrics"
	"github.com/nodeguard/nodeguard/pressure"
	"github.com/nodeguard/nodeguard/qos"
)

// podCgroup is a pod cgroup as the actor last found it.
type podCgroup struct {
	name  string
	rel   string
	id    uint64
	tasks *cgroups.TaskCounter
	// limit is its memory limit (0: none): a Guaranteed pod's memory
	// request without an API server.
	limit int64
}

func (c *podCgroup) close() {
	if c.tasks != nil {
		_ = c.tasks.Close()
	}
}

// podCgroupLocked returns the pod's cgroup as last found, or finds it:
// anew when its name changed or its task counter says it was removed.
func (a *Actor) podCgroupLocked(p Pod) (*podCgroup, error) {
	if c := a.cgs[p.UID]; c != nil && c.name == p.Cgroup {
		if c.tasks == nil {
			// Opening it failed last time: again.
			c.tasks, _ = kubepods.OpenPodTaskCounter(a.cfg.Finder.Layout, p.Cgroup)
		}
		return c, nil
	}
	if c := a.cgs[p.UID]; c != nil {
		c.close()
		delete(a.cgs, p.UID)
	}
	layout := a.cfg.Finder.Layout
	d, err := layout.Memory.Resolve(p.Cgroup)
	if err != nil {
		return nil, err
	}
	c := &podCgroup{name: p.Cgroup, rel: d.Rel}
	if c.id, err = cgroups.ID(d.Path); err != nil {
		return nil, err
	}
	c.limit = memoryLimit(d.Path, layout.Memory.V2())
	if c.tasks, err = kubepods.OpenPodTaskCounter(layout, p.Cgroup); err != nil {
		c.tasks = nil // counted as unknown; opened again next time
	}
	a.cgs[p.UID] = c
	return c, nil
}

// memoryLimit reads the cgroup's memory limit: 0 when it has none (max,
// or v1's huge number) or it cannot be read.
func memoryLimit(dir string, v2 bool) int64 {
	file := "memory.limit_in_bytes"
	if v2 {
		file = "memory.max"
	}
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return 0
	}
	s := strings.TrimSpace(string(b))
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v >= 1<<62 {
		return 0
	}
	return v
}

// Pods lists the kubelet's running pods for the policy: those found in
// the runtime with a cgroup, less the ones this actor evicted (while the
// sandbox it evicted them in is found). Pods the kubelet is stopping
// (deleted or terminal in the API) are listed: they hold memory until
// they are gone, and a decision on one leaves it to the kubelet (Evict).
// A pod whose soft eviction was refused is Refused while its back-off
// runs. calm leaves the task counts unread.
func (a *Actor) Pods(calm bool) []evictionapi.PodRef {
	fp := a.found.Load()
	if fp == nil {
		return nil
	}
	found := *fp
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]evictionapi.PodRef, 0, len(found))
	for _, p := range found {
		if e, ok := a.evicted[p.UID]; ok && e.sandbox == p.SandboxID && time.Since(e.at) < evictedHold {
			continue
		}
		api := a.apiPodLocked(p.UID)
		c, err := a.podCgroupLocked(p)
		if err != nil {
			continue // gone since it was found
		}
		ref := evictionapi.PodRef{CgroupRel: c.rel, Pod: a.figures(p, api, c)}
		if r, ok := a.retryAt[retryKey{p.UID, false}]; ok && time.Now().Before(r.at) {
			ref.Refused = true
		}
		ref.PIDsUnknown = true
		if !calm && c.tasks != nil {
			n, err := c.tasks.Count()
			if errors.Is(err, fs.ErrNotExist) {
				c.close()
				delete(a.cgs, p.UID)
				continue
			}
			ref.PIDs, ref.PIDsUnknown = n, err != nil
		}
		out = append(out, ref)
	}
	return out
}

// figures are what the policy ranks p by: from its API object when there
// is one (the kubelet's own figures), otherwise from the node alone: the
// QoS class from where its cgroup is, a Guaranteed pod's memory request
// from its cgroup's limit (its requests equal its limits), and no
// priority (0) nor request for the others. A static pod is critical
// either way, as the kubelet's IsCriticalPod says.
func (a *Actor) figures(p Pod, api *corev1.Pod, c *podCgroup) evictionapi.Pod {
	o := evictionapi.Pod{UID: p.UID, Namespace: p.Namespace, Name: p.Name, QOS: p.QOS, Static: p.Static, Critical: p.Static,
		Exempt: a.exempt[p.Namespace+"/"+p.Name], CgroupID: c.id, GracePeriod: 30 * time.Second,
		// No storage figures: the kubelet's disk evictions are its own.
		InodesUnknown: true}
	if api != nil {
		req := qos.PodRequests(api)
		o.Priority, o.Critical = qos.Priority(api), p.Static || qos.IsCritical(api)
		o.MemoryRequest, o.EphemeralRequest = req.Memory().Value(), req.StorageEphemeral().Value()
		if g := api.Spec.TerminationGracePeriodSeconds; g != nil {
			o.GracePeriod = time.Duration(*g) * time.Second
		}
		return o
	}
	if p.QOS == corev1.PodQOSGuaranteed {
		o.MemoryRequest = c.limit
	}
	if a.pods != nil && a.synced.Load() {
		// The API server lists the node's pods, but not this one: one
		// made a moment ago, or a nodeName that is not the kubelet's.
		// Its priority is unknown, and it may be critical: not evicted
		// until it is listed (Sync warns). Before the first listing (an
		// API server not reached since the start) the node's figures
		// stand: memory comes first.
		o.Critical = true
	}
	return o
}

// stopping reports whether the API has the pod on its way out: deleted,
// or terminal (the kubelet's eviction writes Failed before it deletes
// nothing, and a pod's controller replaces it from there).
func stopping(p *corev1.Pod) bool {
	return p != nil && (p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded)
}

// PodLabels labels the pods' cgroups for the metrics (metrics.Resolver).
func (a *Actor) PodLabels(k pressure.CgroupKey) (metrics.PodLabels, bool) {
	if k.HierarchyID != a.cfg.Finder.Layout.Memory.ID {
		return metrics.PodLabels{}, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	l, ok := a.byID[k.ID]
	return l, ok
}

func (a *Actor) foundPod(uid types.UID) (Pod, bool) {
	fp := a.found.Load()
	if fp == nil {
		return Pod{}, false
	}
	for _, p := range *fp {
		if p.UID == uid {
			return p, true
		}
	}
	return Pod{}, false
}
