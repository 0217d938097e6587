package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// containerCollector and imageCollector are the node-level reclaim
// functions; *Manager and *ImageGC are them.
type (
	containerCollector interface {
		DeleteAllUnusedContainers(ctx context.Context) (ContainerGCResult, error)
	}
	imageCollector interface {
		DeleteUnusedImages(ctx context.Context) (int64, error)
	}
)

// NodeReclaimer is the kubelet's signalToNodeReclaimFuncs
// (pkg/kubelet/eviction/helpers.go buildSignalToNodeReclaimFuncs), for
// the eviction manager (evictionapi.NodeReclaimer):
//
//   - imagefs and nodefs on one filesystem: every disk signal removes dead
//     containers and sandboxes, then unused images;
//   - a dedicated imagefs: imagefs.* does that, nodefs.* has no reclaim
//     function (the kubelet's "nodefs pressure should just delete logs":
//     what is left there is pod volumes and logs, which only eviction
//     frees).
type NodeReclaimer struct {
	Containers containerCollector
	// Images is nil without an image collector: containers only.
	Images imageCollector
	// DedicatedImageFS: the image filesystem is not the nodefs
	// (SameFilesystem false).
	DedicatedImageFS bool
	Logger           *slog.Logger
	// OnReclaim, when set, is told what each reclaim freed (metrics).
	OnReclaim func(signal nodestats.Signal, containers ContainerGCResult, imageBytes int64)
}

// ReclaimNode runs the reclaim functions of signal, reporting whether it
// has any. Both run even if the first fails, as the kubelet's.
func (r *NodeReclaimer) ReclaimNode(ctx context.Context, signal nodestats.Signal) (bool, error) {
	switch signal {
	case nodestats.SignalImageFsAvailable, nodestats.SignalImageFsInodesFree:
	case nodestats.SignalNodeFsAvailable, nodestats.SignalNodeFsInodesFree:
		if r.DedicatedImageFS {
			return false, nil
		}
	default:
		return false, nil
	}
	log := r.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var errs []error
	res, err := r.Containers.DeleteAllUnusedContainers(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	var freed int64
	if r.Images != nil {
		freed, err = r.Images.DeleteUnusedImages(ctx)
		if err != nil {
			errs = append(errs, err)
		}
	}
	log.Info("node-level reclaim", "signal", signal, "containers_removed", res.Containers,
		"sandboxes_removed", res.Sandboxes, "image_bytes_freed", freed)
	if r.OnReclaim != nil {
		r.OnReclaim(signal, res, freed)
	}
	return true, errors.Join(errs...)
}

// SameFilesystem reports whether paths a and b are on one filesystem
// (one device), as the kubelet compares the imagefs and nodefs devices
// (HasDedicatedImageFs).
func SameFilesystem(a, b string) (bool, error) {
	var sa, sb unix.Stat_t
	if err := unix.Stat(a, &sa); err != nil {
		return false, fmt.Errorf("stat %s: %w", a, err)
	}
	if err := unix.Stat(b, &sb); err != nil {
		return false, fmt.Errorf("stat %s: %w", b, err)
	}
	return sa.Dev == sb.Dev, nil
}
