package agent

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nodeguard/nodeguard/eviction"
	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/metrics"
)

// storageSampler hands the pod manager's newest sample of every pod's
// ephemeral storage (taken every 10 s by its local-storage pass, which
// walks volume and log directories) to the exporter, so a scrape never
// walks a directory and nothing walks them twice.
type storageSampler struct {
	mgr    *lifecycle.Manager
	every  time.Duration
	log    *slog.Logger
	latest atomic.Pointer[metrics.StorageSample]
}

// LatestStorage implements metrics.StorageSource.
func (s *storageSampler) LatestStorage() *metrics.StorageSample { return s.latest.Load() }

// Run samples until ctx ends.
func (s *storageSampler) Run(ctx context.Context) {
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		s.sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *storageSampler) sample(ctx context.Context) {
	pods, taken := s.mgr.LatestStorage()
	if taken.IsZero() {
		return // no pass has finished yet
	}
	out := &metrics.StorageSample{Taken: taken, Pods: make([]metrics.PodStorage, 0, len(pods))}
	for i := range pods {
		p := &pods[i]
		ps := metrics.PodStorage{Namespace: p.Namespace, Pod: p.Name, UID: string(p.UID), EphemeralBytes: p.EphemeralBytes()}
		for _, v := range p.Volumes {
			ps.Volumes = append(ps.Volumes, metrics.VolumeStorage{Volume: v.Name, Plugin: v.Plugin, Medium: v.Medium, Bytes: v.Bytes, Inodes: v.Inodes})
		}
		for _, c := range p.Containers {
			ps.Containers = append(ps.Containers, metrics.ContainerStorage{Container: c.Name, RootfsBytes: c.RootfsBytes, RootfsInodes: c.RootfsInodes, LogsBytes: c.LogsBytes})
		}
		out.Pods = append(out.Pods, ps)
	}
	s.latest.Store(out)
}

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
