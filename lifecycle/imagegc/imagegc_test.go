package imagegc

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

const gib = uint64(1) << 30

// fakeImages is a runtime's image store and containers; removing an
// image gives its size back to the filesystem fs.
type fakeImages struct {
	mu      sync.Mutex
	images  []*runtimeapi.Image
	ctrs    []*runtimeapi.Container
	removed []string
	failOn  map[string]error
	fs      *fakeImageFS
}

func (f *fakeImages) ListImages(context.Context) ([]*runtimeapi.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.images), nil
}

func (f *fakeImages) ListAllContainers(context.Context) ([]*runtimeapi.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.ctrs), nil
}

func (f *fakeImages) RemoveImage(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failOn[id]; err != nil {
		return err
	}
	i := slices.IndexFunc(f.images, func(im *runtimeapi.Image) bool { return im.Id == id })
	if i < 0 {
		return nil
	}
	if f.fs != nil {
		f.fs.free(f.images[i].Size)
	}
	f.images = slices.Delete(f.images, i, i+1)
	f.removed = append(f.removed, id)
	return nil
}

func (f *fakeImages) setContainers(c ...*runtimeapi.Container) {
	f.mu.Lock()
	f.ctrs = c
	f.mu.Unlock()
}

func (f *fakeImages) gone() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.removed)
}

// fakeImageFS is an image filesystem of capacity bytes.
type fakeImageFS struct {
	mu                  sync.Mutex
	capacity, available uint64
	err                 error
}

func (f *fakeImageFS) Stats(context.Context) (ImageFSStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return ImageFSStats{FSStats: nodestats.FSStats{CapacityBytes: f.capacity, AvailableBytes: f.available}, Mountpoint: "/images"}, f.err
}

func (f *fakeImageFS) free(n uint64) {
	f.mu.Lock()
	f.available += n
	f.mu.Unlock()
}

func image(id string, size uint64, tags ...string) *runtimeapi.Image {
	return &runtimeapi.Image{Id: id, Size: size, RepoTags: tags}
}

func usingImage(id, ref, name string, state runtimeapi.ContainerState) *runtimeapi.Container {
	return &runtimeapi.Container{Id: id, ImageRef: ref, Image: &runtimeapi.ImageSpec{Image: name}, State: state}
}

// clock is a fake clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newTestImageGC(t *testing.T, rt *fakeImages, fs *fakeImageFS, clk *clock, pinned ...string) *Collector {
	t.Helper()
	if fs == nil {
		fs = &fakeImageFS{capacity: 100 * gib, available: 50 * gib}
	}
	rt.fs = fs
	g, err := New(Config{Runtime: rt, FS: fs, Policy: DefaultPolicy(), Pinned: pinned, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestImageGCSelection(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name string
		// images at the first detection, and images that appear later
		// (after ageBeforeNew), then the step before the collection
		images, later []*runtimeapi.Image
		ctrs          []*runtimeapi.Container
		pinned        []string
		ageBeforeNew  time.Duration
		ageAfterNew   time.Duration
		failOn        map[string]error
		want          []string // removed, in order
		wantErr       string
	}{
		{
			name:   "unused images found at start go at once, an image in use by any container stays",
			images: []*runtimeapi.Image{image("sha256:a", gib, "a:1"), image("sha256:b", gib, "b:1"), image("sha256:c", gib, "c:1")},
			ctrs: []*runtimeapi.Container{
				usingImage("running", "sha256:a", "a:1", runtimeapi.ContainerState_CONTAINER_RUNNING),
				usingImage("exited-by-name", "", "b:1", runtimeapi.ContainerState_CONTAINER_EXITED),
			},
			want: []string{"sha256:c"},
		},
		{
			name: "pinned images and the sandbox image stay",
			images: []*runtimeapi.Image{{Id: "sha256:pinned", Size: gib, Pinned: true}, image("sha256:pause", gib, "registry.local/pause:3.9"),
				image("sha256:old", gib, "old:1")},
			pinned: []string{"registry.local/pause:3.9"},
			want:   []string{"sha256:old"},
		},
		{
			name:         "an image first seen less than the minimum age ago stays",
			images:       []*runtimeapi.Image{image("sha256:old", gib, "old:1")},
			later:        []*runtimeapi.Image{image("sha256:young", gib, "young:1")},
			ageBeforeNew: time.Hour, ageAfterNew: DefaultMinimumAge - time.Second,
			want: []string{"sha256:old"},
		},
		{
			name:         "an image first seen the minimum age ago goes",
			images:       []*runtimeapi.Image{image("sha256:old", gib, "old:1")},
			later:        []*runtimeapi.Image{image("sha256:young", gib, "young:1")},
			ageBeforeNew: time.Hour, ageAfterNew: DefaultMinimumAge,
			want: []string{"sha256:old", "sha256:young"},
		},
		{
			name:    "a failed removal is reported and the next image tried",
			images:  []*runtimeapi.Image{image("sha256:a", gib), image("sha256:b", gib)},
			failOn:  map[string]error{"sha256:a": errors.New("remove image sha256:a: in use by a snapshot")},
			want:    []string{"sha256:b"},
			wantErr: "freed 1073741824 bytes with errors: remove image sha256:a",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &clock{now: t0}
			rt := &fakeImages{images: slices.Clone(tc.images), ctrs: tc.ctrs, failOn: tc.failOn}
			g := newTestImageGC(t, rt, nil, clk, tc.pinned...)
			if err := g.detect(t.Context(), clk.Now()); err != nil {
				t.Fatal(err)
			}
			clk.advance(tc.ageBeforeNew)
			if len(tc.later) > 0 {
				rt.mu.Lock()
				rt.images = append(rt.images, tc.later...)
				rt.mu.Unlock()
				if err := g.detect(t.Context(), clk.Now()); err != nil {
					t.Fatal(err)
				}
			}
			clk.advance(tc.ageAfterNew)
			freed, err := g.DeleteUnusedImages(t.Context())
			if got := rt.gone(); !slices.Equal(got, tc.want) {
				t.Errorf("removed %v, want %v", got, tc.want)
			}
			if want := int64(len(tc.want)) * int64(gib); freed != want {
				t.Errorf("freed %d bytes, want %d", freed, want)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("DeleteUnusedImages: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("DeleteUnusedImages error %v, want one with %q", err, tc.wantErr)
			}
		})
	}
}

// TestImageGCRemovesLeastRecentlyUsedFirst: images used by containers at
// different times go in the order they were last used, and the
// collection stops once enough is freed.
func TestImageGCRemovesLeastRecentlyUsedFirst(t *testing.T) {
	clk := &clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	rt := &fakeImages{images: []*runtimeapi.Image{image("sha256:x", 4*gib), image("sha256:y", 4*gib), image("sha256:z", 4*gib)}}
	// 100 GiB, 12 GiB available: 88% used, at or above 85%; down to 80%
	// wants 20-12 = 8 GiB freed, two of the three images.
	fs := &fakeImageFS{capacity: 100 * gib, available: 12 * gib}
	g := newTestImageGC(t, rt, fs, clk)
	for _, id := range []string{"sha256:y", "sha256:z", "sha256:x"} { // y used longest ago
		rt.setContainers(usingImage("c", id, "", runtimeapi.ContainerState_CONTAINER_RUNNING))
		if err := g.detect(t.Context(), clk.Now()); err != nil {
			t.Fatal(err)
		}
		clk.advance(time.Minute)
	}
	rt.setContainers()
	clk.advance(time.Hour)
	if err := g.GarbageCollect(t.Context()); err != nil {
		t.Fatalf("GarbageCollect: %v", err)
	}
	if got, want := rt.gone(), []string{"sha256:y", "sha256:z"}; !slices.Equal(got, want) {
		t.Errorf("removed %v, want %v (least recently used first, then enough)", got, want)
	}

	// Below the high threshold nothing goes.
	if err := g.GarbageCollect(t.Context()); err != nil {
		t.Fatalf("GarbageCollect below the threshold: %v", err)
	}
	if got := rt.gone(); len(got) != 2 {
		t.Errorf("below the high threshold it removed %v", got[2:])
	}
}

func TestImageGCReportsWhatItCouldNotFree(t *testing.T) {
	clk := &clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	rt := &fakeImages{images: []*runtimeapi.Image{image("sha256:x", gib)}}
	g := newTestImageGC(t, rt, &fakeImageFS{capacity: 100 * gib, available: 5 * gib}, clk)
	err := g.GarbageCollect(t.Context())
	if err == nil || !strings.Contains(err.Error(), "wanted to free 16106127360 bytes, freed 1073741824") {
		t.Errorf("GarbageCollect: %v, want it to say how much it wanted and freed", err)
	}
	g2 := newTestImageGC(t, &fakeImages{}, &fakeImageFS{capacity: 0}, clk)
	if err := g2.GarbageCollect(t.Context()); err == nil || !strings.Contains(err.Error(), "capacity 0") {
		t.Errorf("GarbageCollect on a filesystem of capacity 0: %v", err)
	}
}

func TestImageGCPolicyValidate(t *testing.T) {
	for _, tc := range []struct {
		p    Policy
		want string
	}{
		{Policy{HighThresholdPercent: 101, LowThresholdPercent: 80}, "imageGCHighThresholdPercent: invalid image GC policy: 101 is not between 0 and 100"},
		{Policy{HighThresholdPercent: 85, LowThresholdPercent: -1}, "imageGCLowThresholdPercent: invalid image GC policy: -1 is not between 0 and 100"},
		{Policy{HighThresholdPercent: 70, LowThresholdPercent: 80}, "imageGCLowThresholdPercent: invalid image GC policy: 80 is above imageGCHighThresholdPercent 70"},
		{Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: -time.Second}, "imageMinimumGCAge: invalid image GC policy: -1s is negative"},
	} {
		err := tc.p.Validate()
		if err == nil || err.Error() != tc.want || !errors.Is(err, ErrPolicy) {
			t.Errorf("%+v: %v, want %q", tc.p, err, tc.want)
		}
	}
	if err := DefaultPolicy().Validate(); err != nil {
		t.Errorf("the defaults: %v", err)
	}
}

// TestImageGCKeepsTheImagesOfImageVolumes: an image an image volume
// mounts is in use although no container names it (Config.InUse:
// the Manager's ImageVolumeImages); once the pod is gone it may go.
func TestImageGCKeepsTheImagesOfImageVolumes(t *testing.T) {
	clk := &clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	rt := &fakeImages{images: []*runtimeapi.Image{image("sha256:content", gib, "registry.local/content:1"), image("sha256:old", gib, "old:1")}}
	fs := &fakeImageFS{capacity: 100 * gib, available: 50 * gib}
	rt.fs = fs
	inUse := []string{"sha256:content"}
	g, err := New(Config{Runtime: rt, FS: fs, Policy: DefaultPolicy(), Now: clk.Now,
		InUse: func() []string { return inUse }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.DeleteUnusedImages(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := rt.gone(); !slices.Equal(got, []string{"sha256:old"}) {
		t.Fatalf("removed %v, want only the image no one uses", got)
	}
	inUse = nil // the pod is deleted
	clk.advance(time.Hour)
	if _, err := g.DeleteUnusedImages(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := rt.gone(); !slices.Equal(got, []string{"sha256:old", "sha256:content"}) {
		t.Errorf("removed %v, want the volume's image once no pod mounts it", got)
	}
}
