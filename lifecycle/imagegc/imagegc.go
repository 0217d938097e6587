package imagegc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Defaults of Policy and Collector, the kubelet's.
const (
	// DefaultHighThresholdPercent: above this image filesystem
	// usage the periodic collection removes images
	// (imageGCHighThresholdPercent).
	DefaultHighThresholdPercent = 85
	// DefaultLowThresholdPercent: it removes until usage is back
	// to this (imageGCLowThresholdPercent).
	DefaultLowThresholdPercent = 80
	// DefaultMinimumAge: an image seen for less than this is never
	// removed: it may just have been pulled for a container about to be
	// created (imageMinimumGCAge).
	DefaultMinimumAge = 2 * time.Minute
	// DefaultPeriod is the kubelet's ImageGCPeriod.
	DefaultPeriod = 5 * time.Minute
)

// ErrPolicy is wrapped for an invalid Policy.
var ErrPolicy = errors.New("invalid image GC policy")

// Policy is the kubelet's image garbage collection policy: a band
// of image filesystem usage, in percent of its capacity, and a minimum
// age.
type Policy struct {
	// HighThresholdPercent: at or above this usage the periodic
	// collection frees down to LowThresholdPercent. 100 disables the
	// periodic collection (the kubelet's rule); the eviction path still
	// removes unused images.
	HighThresholdPercent int
	LowThresholdPercent  int
	// MinAge: images first seen less than this long ago are kept.
	MinAge time.Duration
}

// DefaultPolicy returns the kubelet's defaults: 85 %, 80 %, 2m.
func DefaultPolicy() Policy {
	return Policy{
		HighThresholdPercent: DefaultHighThresholdPercent,
		LowThresholdPercent:  DefaultLowThresholdPercent,
		MinAge:               DefaultMinimumAge,
	}
}

// Validate checks p as the kubelet validates its configuration; errors
// name the kubelet's field.
func (p Policy) Validate() error {
	var errs []error
	if p.HighThresholdPercent < 0 || p.HighThresholdPercent > 100 {
		errs = append(errs, fmt.Errorf("imageGCHighThresholdPercent: %w: %d is not between 0 and 100", ErrPolicy, p.HighThresholdPercent))
	}
	if p.LowThresholdPercent < 0 || p.LowThresholdPercent > 100 {
		errs = append(errs, fmt.Errorf("imageGCLowThresholdPercent: %w: %d is not between 0 and 100", ErrPolicy, p.LowThresholdPercent))
	}
	if p.LowThresholdPercent > p.HighThresholdPercent {
		errs = append(errs, fmt.Errorf("imageGCLowThresholdPercent: %w: %d is above imageGCHighThresholdPercent %d", ErrPolicy, p.LowThresholdPercent, p.HighThresholdPercent))
	}
	if p.MinAge < 0 {
		errs = append(errs, fmt.Errorf("imageMinimumGCAge: %w: %v is negative", ErrPolicy, p.MinAge))
	}
	return errors.Join(errs...)
}

// imageGCRuntime is the part of the CRI the image collector uses;
// *cri.Client is one.
type imageGCRuntime interface {
	ListImages(ctx context.Context) ([]*runtimeapi.Image, error)
	RemoveImage(ctx context.Context, id string) error
	ListAllContainers(ctx context.Context) ([]*runtimeapi.Container, error)
}

// imageFSStatser is what the collector measures usage with; *ImageFS is
// one.
type imageFSStatser interface {
	Stats(ctx context.Context) (ImageFSStats, error)
}

// Config configures an Collector.
type Config struct {
	Runtime imageGCRuntime
	FS      imageFSStatser
	Policy  Policy
	// Pinned are image references (IDs, tags or digests) that are never
	// removed, besides the images the runtime marks pinned: the runtime's
	// sandbox image, which a runtime that does not pin it (containerd 1.x)
	// needs for every new pod and nodeguard may not be able to pull back.
	Pinned []string
	// InUse, when set, names more images in use (IDs, tags or digests)
	// that no container names: the images of the pods' image volumes
	// (Manager.ImageVolumeImages). They are kept and marked used, as a
	// container's image.
	InUse func() []string
	// Period: DefaultPeriod when 0.
	Period time.Duration
	Now    func() time.Time
	Logger *slog.Logger
	// OnRemoved, when set, is told of every image removed and its size
	// (metrics).
	OnRemoved func(id string, size uint64)
}

// Collector is the kubelet's image garbage collector (pkg/kubelet/images
// image_gc_manager.go) over the CRI: it keeps a record of every image
// with when it was first seen and last used by a container, and removes
// unused images least recently used first, never one a container
// (nodeguard's or anyone's, running or not) uses, never a pinned one, and
// never one seen for less than MinAge. Its methods are safe for
// concurrent use; removals are serialised.
type Collector struct {
	cfg Config
	log *slog.Logger

	removing sync.Mutex // held by freeSpace: one collection at a time

	mu          sync.Mutex // guards what follows
	records     map[string]*imageRecord
	initialized bool
}

// imageRecord is what the collector knows of one image.
type imageRecord struct {
	firstDetected time.Time
	lastUsed      time.Time
	size          uint64
	tags          []string // for log lines
}

// New validates cfg and returns a collector with no records.
func New(cfg Config) (*Collector, error) {
	if cfg.Runtime == nil || cfg.FS == nil {
		return nil, errors.New("new image gc: runtime and image filesystem are required")
	}
	if err := cfg.Policy.Validate(); err != nil {
		return nil, fmt.Errorf("new image gc: %w", err)
	}
	if cfg.Period < 0 {
		return nil, fmt.Errorf("new image gc: period %v is negative", cfg.Period)
	}
	if cfg.Period == 0 {
		cfg.Period = DefaultPeriod
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Collector{cfg: cfg, log: log, records: map[string]*imageRecord{}}, nil
}

// Run records the images at once and collects every Period until ctx is
// done. The first record dates every image found "in the unknown past"
// (the kubelet's rule): what was there before nodeguard started is old
// enough to go.
func (g *Collector) Run(ctx context.Context) {
	if err := g.detect(ctx, time.Time{}); err != nil {
		g.log.Warn("image gc: list images", "err", err)
	}
	t := time.NewTicker(g.cfg.Period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if g.cfg.Policy.HighThresholdPercent == 100 {
			// Disabled, as the kubelet's: only keep the records fresh.
			if err := g.detect(ctx, g.cfg.Now()); err != nil {
				g.log.Warn("image gc: list images", "err", err)
			}
			continue
		}
		if err := g.GarbageCollect(ctx); err != nil {
			g.log.Warn("image gc", "err", err)
		}
	}
}

// GarbageCollect applies the policy once: at or above
// HighThresholdPercent usage of the image filesystem, it frees enough to
// get back to LowThresholdPercent. Freeing less than that is an error.
func (g *Collector) GarbageCollect(ctx context.Context) error {
	st, err := g.cfg.FS.Stats(ctx)
	if err != nil {
		return fmt.Errorf("image gc: %w", err)
	}
	capacity, available := st.CapacityBytes, st.AvailableBytes
	if capacity == 0 {
		return fmt.Errorf("image gc: image filesystem %s has capacity 0", st.Mountpoint)
	}
	available = min(available, capacity)
	usage := 100 - int(available*100/capacity)
	if usage < g.cfg.Policy.HighThresholdPercent {
		return g.detect(ctx, g.cfg.Now())
	}
	want := int64(capacity*uint64(100-g.cfg.Policy.LowThresholdPercent)/100) - int64(available)
	g.log.Info("image gc: image filesystem usage over the high threshold", "mountpoint", st.Mountpoint,
		"usage_percent", usage, "high_threshold_percent", g.cfg.Policy.HighThresholdPercent, "bytes_to_free", want)
	freed, err := g.freeSpace(ctx, want, g.cfg.Now())
	if err != nil {
		return err
	}
	if freed < want {
		return fmt.Errorf("image gc: wanted to free %d bytes, freed %d: no more unused images old enough", want, freed)
	}
	return nil
}

// DeleteUnusedImages removes every unused image old enough, whatever the
// usage: the eviction path's node-level reclaim. It returns the bytes
// freed (the images' sizes as the runtime reports them), also on error.
func (g *Collector) DeleteUnusedImages(ctx context.Context) (int64, error) {
	return g.freeSpace(ctx, math.MaxInt64, g.cfg.Now())
}

// detect brings the records up to date with the runtime: new images are
// first seen at detected (zero on the first call: the unknown past),
// images a container uses were last used now, vanished ones are dropped.
func (g *Collector) detect(ctx context.Context, detected time.Time) error {
	_, err := g.detectKeep(ctx, detected)
	return err
}

// detectKeep is detect returning the IDs that must stay: in use or pinned.
func (g *Collector) detectKeep(ctx context.Context, detected time.Time) (keep map[string]bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	imgs, err := g.cfg.Runtime.ListImages(cctx)
	if err != nil {
		return nil, fmt.Errorf("image gc: %w", err)
	}
	ctrs, err := g.cfg.Runtime.ListAllContainers(cctx)
	if err != nil {
		return nil, fmt.Errorf("image gc: %w", err)
	}
	now := g.cfg.Now()
	used := usedImages(imgs, ctrs)
	if g.cfg.InUse != nil {
		maps.Copy(used, refsOf(imgs, g.cfg.InUse()))
	}
	pinned := refsOf(imgs, g.cfg.Pinned)

	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.initialized {
		detected, g.initialized = time.Time{}, true
	}
	seen := make(map[string]bool, len(imgs))
	keep = map[string]bool{}
	for _, im := range imgs {
		id := im.GetId()
		seen[id] = true
		r, ok := g.records[id]
		if !ok {
			r = &imageRecord{firstDetected: detected}
			g.records[id] = r
		}
		if used[id] {
			r.lastUsed = now
			keep[id] = true
		}
		if im.GetPinned() || pinned[id] {
			keep[id] = true
		}
		r.size, r.tags = im.GetSize(), im.GetRepoTags()
	}
	for id := range g.records {
		if !seen[id] {
			delete(g.records, id)
		}
	}
	return keep, nil
}

// usedImages returns the IDs of the images some container uses: by the
// image reference the runtime resolved (ImageRef, the kubelet's
// ImageID), or else by the name in its spec.
func usedImages(imgs []*runtimeapi.Image, ctrs []*runtimeapi.Container) map[string]bool {
	names := make([]string, 0, 2*len(ctrs))
	for _, c := range ctrs {
		names = append(names, c.GetImageRef(), c.GetImage().GetImage())
	}
	return refsOf(imgs, names)
}

// refsOf returns the IDs of the images that refs name, by ID, tag or
// digest.
func refsOf(imgs []*runtimeapi.Image, refs []string) map[string]bool {
	want := make(map[string]bool, len(refs))
	for _, r := range refs {
		if r != "" {
			want[r] = true
		}
	}
	out := map[string]bool{}
	for _, im := range imgs {
		if want[im.GetId()] || slices.ContainsFunc(im.GetRepoTags(), func(s string) bool { return want[s] }) ||
			slices.ContainsFunc(im.GetRepoDigests(), func(s string) bool { return want[s] }) {
			out[im.GetId()] = true
		}
	}
	return out
}

// gcCandidate is an image in eviction order.
type gcCandidate struct {
	id string
	imageRecord
}

// evictionOrder returns the images that may go at freeTime, least
// recently used first, then first seen first, then by ID (a total order):
// not kept (in use or pinned) and seen for at least minAge.
func evictionOrder(records map[string]*imageRecord, keep map[string]bool, freeTime time.Time, minAge time.Duration) []gcCandidate {
	var out []gcCandidate
	for id, r := range records {
		if keep[id] || freeTime.Sub(r.firstDetected) < minAge {
			continue
		}
		out = append(out, gcCandidate{id: id, imageRecord: *r})
	}
	slices.SortFunc(out, func(a, b gcCandidate) int {
		return cmp.Or(a.lastUsed.Compare(b.lastUsed), a.firstDetected.Compare(b.firstDetected), cmp.Compare(a.id, b.id))
	})
	return out
}

// freeSpace removes images in eviction order until want bytes are freed;
// a failed removal is reported and the next image tried.
func (g *Collector) freeSpace(ctx context.Context, want int64, freeTime time.Time) (int64, error) {
	g.removing.Lock()
	defer g.removing.Unlock()
	keep, err := g.detectKeep(ctx, freeTime)
	if err != nil {
		return 0, err
	}
	g.mu.Lock()
	order := evictionOrder(g.records, keep, freeTime, g.cfg.Policy.MinAge)
	g.mu.Unlock()
	var errs []error
	var freed int64
	for _, c := range order {
		if freed >= want {
			break
		}
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		err := g.cfg.Runtime.RemoveImage(cctx, c.id)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		g.mu.Lock()
		delete(g.records, c.id)
		g.mu.Unlock()
		freed += int64(min(c.size, math.MaxInt64))
		g.log.Info("image gc: removed an unused image", "image", c.id, "tags", c.tags, "size_bytes", c.size,
			"last_used", c.lastUsed, "first_seen", c.firstDetected)
		if g.cfg.OnRemoved != nil {
			g.cfg.OnRemoved(c.id, c.size)
		}
	}
	if len(errs) > 0 {
		return freed, fmt.Errorf("image gc: freed %d bytes with errors: %w", freed, errors.Join(errs...))
	}
	return freed, nil
}

// callTimeout bounds one runtime call of the collector, as the
// lifecycle's own calls are bounded.
const callTimeout = 2 * time.Minute
