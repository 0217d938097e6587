package imagegc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// Defaults of ImageFS.
const (
	// DefaultImageFSTimeout bounds one ImageFsInfo call: the kubelet's
	// CRI calls are bounded the same way (its runtime request timeout is
	// 2 min, but this one runs on the pressure tick, whose bound on the
	// statfs is nodestats.DefaultStatFSTimeout).
	DefaultImageFSTimeout = 2 * time.Second
	// DefaultImageFSRefresh is how long the runtime's answer (mountpoint,
	// bytes its images use) is reused: the kubelet asks once per
	// housekeeping (10 s). The mountpoint does not move; the statfs,
	// which gives the signal, is made on every call.
	DefaultImageFSRefresh = 10 * time.Second
)

// ErrNoImageFS is wrapped when the runtime reports no image filesystem,
// or one without a mountpoint.
var ErrNoImageFS = errors.New("the runtime reports no image filesystem")

// imageFSRuntime is the part of the CRI ImageFS asks; *cri.Client is one.
type imageFSRuntime interface {
	ImageFsInfo(ctx context.Context) ([]*runtimeapi.FilesystemUsage, error)
}

// ImageFSStats is the image filesystem as the kubelet's CRI stats provider
// sees it (pkg/kubelet/stats cri_stats_provider ImageFsStats): the
// runtime names the mountpoint and the bytes and inodes its images use;
// capacity and what is available come from statfs of that mountpoint.
type ImageFSStats struct {
	nodestats.FSStats
	Mountpoint string
	// UsedBytes and InodesUsed are the runtime's own figures; HasUsed
	// says whether it gave them.
	UsedBytes, InodesUsed uint64
	HasUsed               bool
}

// ImageFS observes the runtime's image filesystem, for the imagefs.*
// signals and the image collector. Its methods are safe for concurrent
// use.
type ImageFS struct {
	Runtime imageFSRuntime
	// StatFS is nodestats.StatFS when nil (injected for tests). It runs
	// through a nodestats.FSProbe of the mountpoint, bounded by
	// StatFSTimeout (nodestats.DefaultStatFSTimeout when 0), with at most
	// one call in flight: a hung image filesystem leaves the imagefs.*
	// signals out, it does not hang the snapshot.
	StatFS        func(path string) (nodestats.FSStats, error)
	StatFSTimeout time.Duration
	// Timeout and Refresh: see their defaults (used when 0).
	Timeout, Refresh time.Duration
	Now              func() time.Time

	mu     sync.Mutex
	cached *runtimeapi.FilesystemUsage
	at     time.Time
	probe  *nodestats.FSProbe // of cached's mountpoint
}

// Stats returns the image filesystem's statistics. The runtime reports
// one filesystem per store; like the kubelet, the first is the imagefs.
func (f *ImageFS) Stats(ctx context.Context) (ImageFSStats, error) {
	timeout := f.Timeout
	if timeout <= 0 {
		timeout = DefaultImageFSTimeout
	}
	fs, probe, err := f.usage(ctx, timeout)
	if err != nil {
		return ImageFSStats{}, err
	}
	mp := fs.GetFsId().GetMountpoint()
	st, err := probe.Stat(ctx)
	if err != nil {
		return ImageFSStats{}, fmt.Errorf("image filesystem: %w", err)
	}
	out := ImageFSStats{FSStats: st, Mountpoint: mp}
	if fs.GetUsedBytes() != nil {
		out.UsedBytes, out.InodesUsed, out.HasUsed = fs.GetUsedBytes().GetValue(), fs.GetInodesUsed().GetValue(), true
	}
	return out, nil
}

// FSStats is Stats without the runtime's figures: the input of
// pressure.Config.ImageFS.
func (f *ImageFS) FSStats(ctx context.Context) (nodestats.FSStats, error) {
	st, err := f.Stats(ctx)
	return st.FSStats, err
}

// usage returns the runtime's first image filesystem and the probe of its
// mountpoint, asking the runtime again once Refresh has passed.
func (f *ImageFS) usage(ctx context.Context, timeout time.Duration) (*runtimeapi.FilesystemUsage, *nodestats.FSProbe, error) {
	now := time.Now
	if f.Now != nil {
		now = f.Now
	}
	refresh := f.Refresh
	if refresh <= 0 {
		refresh = DefaultImageFSRefresh
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cached != nil && now().Sub(f.at) < refresh {
		return f.cached, f.probe, nil
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	all, err := f.Runtime.ImageFsInfo(cctx)
	if err != nil {
		return nil, nil, fmt.Errorf("image filesystem: %w", err)
	}
	if len(all) == 0 {
		return nil, nil, fmt.Errorf("image filesystem: %w", ErrNoImageFS)
	}
	mp := all[0].GetFsId().GetMountpoint()
	if mp == "" {
		return nil, nil, fmt.Errorf("image filesystem: %w: the first has no mountpoint", ErrNoImageFS)
	}
	if f.probe == nil || f.probe.Path() != mp {
		f.probe = nodestats.NewFSProbe(mp, f.StatFSTimeout, f.StatFS)
	}
	f.cached, f.at = all[0], now()
	return f.cached, f.probe, nil
}
