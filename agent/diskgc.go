package agent

import (
	"context"
	"log/slog"
	"sync/atomic"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/config"
	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/lifecycle/imagegc"
	"github.com/nodeguard/nodeguard/metrics"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// diskGC is the disk side of `nodeguard run`: the image filesystem as the
// runtime names it (for the imagefs.* signals), the image collector and
// the node-level reclaim the eviction manager runs before a disk
// eviction.
type diskGC struct {
	imageFS *imagegc.ImageFS
	images  *imagegc.Collector
	reclaim *lifecycle.NodeReclaimer
	// metrics is set once the exporter exists (after sensing started).
	metrics atomic.Pointer[metrics.GC]
}

// diskRuntime is the part of the CRI the disk side uses; *cri.Client is
// one.
type diskRuntime interface {
	ImageFsInfo(ctx context.Context) ([]*runtimeapi.FilesystemUsage, error)
	SandboxImage(ctx context.Context) (string, bool, error)
	ImageStatus(ctx context.Context, ref string) (*runtimeapi.Image, error)
	ListImages(ctx context.Context) ([]*runtimeapi.Image, error)
	RemoveImage(ctx context.Context, id string) error
	ListAllContainers(ctx context.Context) ([]*runtimeapi.Container, error)
}

var _ diskRuntime = (*cri.Client)(nil)

// newDiskGC asks the runtime where its images are (through imageFS, which
// observes them for the snapshots too) and what its sandbox image is. An image filesystem it cannot observe now is logged: the
// imagefs.* signals are then missing until it can (every snapshot asks
// again), and nodefs and imagefs are taken as one filesystem.
func newDiskGC(ctx context.Context, client diskRuntime, imageFS *imagegc.ImageFS, mgr *lifecycle.Manager, cfg config.Run, nodeFS string, log *slog.Logger) (*diskGC, error) {
	d := &diskGC{imageFS: imageFS}
	dedicated := false
	if st, err := d.imageFS.Stats(ctx); err != nil {
		log.Warn("image filesystem not observed: no imagefs.* signals until the runtime reports it", "err", err)
	} else {
		same, err := lifecycle.SameFilesystem(nodeFS, st.Mountpoint)
		if err != nil {
			log.Warn("image filesystem: taken as the nodefs", "err", err)
			same = true
		}
		dedicated = !same
		log.Info("image filesystem", "mountpoint", st.Mountpoint, "capacity_bytes", st.CapacityBytes,
			"available_bytes", st.AvailableBytes, "images_bytes", st.UsedBytes, "dedicated", dedicated)
	}
	var pinned []string
	if ref, ok, err := client.SandboxImage(ctx); err != nil {
		log.Warn("image gc: the runtime's sandbox image is unknown; only images it pins are kept besides those in use", "err", err)
	} else if ok {
		pinned = append(pinned, ref)
		// By its ID too, as the kubelet's GetImageRef(sandboxImage): the
		// runtime may list the image under a normalised name.
		if img, err := client.ImageStatus(ctx, ref); err == nil {
			pinned = append(pinned, img.GetId())
		}
		log.Info("image gc: the runtime's sandbox image is never removed", "image", ref)
	}
	images, err := imagegc.New(imagegc.Config{
		Runtime: client, FS: d.imageFS, Policy: cfg.ImageGCPolicy(), Pinned: pinned, Logger: log,
		InUse: mgr.ImageVolumeImages,
		OnRemoved: func(_ string, size uint64) {
			if m := d.metrics.Load(); m != nil {
				m.ImageRemoved(size)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	d.images = images
	d.reclaim = &lifecycle.NodeReclaimer{Containers: mgr, Images: images, DedicatedImageFS: dedicated, Logger: log,
		OnReclaim: func(sig nodestats.Signal, c lifecycle.ContainerGCResult, _ int64) {
			if m := d.metrics.Load(); m != nil {
				m.Reclaimed(string(sig))
				m.ContainersRemoved(c.Containers, c.Sandboxes)
			}
		}}
	return d, nil
}
