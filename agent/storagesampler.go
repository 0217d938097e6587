package agent

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

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
