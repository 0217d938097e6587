package imagegc

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// fakeImageFSInfo answers ImageFsInfo with fss (or err) and counts calls.
type fakeImageFSInfo struct {
	mu    sync.Mutex
	fss   []*runtimeapi.FilesystemUsage
	err   error
	calls int
}

func (f *fakeImageFSInfo) ImageFsInfo(context.Context) ([]*runtimeapi.FilesystemUsage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return f.fss, f.err
}

func fsUsage(mountpoint string, used, inodes uint64) *runtimeapi.FilesystemUsage {
	return &runtimeapi.FilesystemUsage{FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: mountpoint},
		UsedBytes: &runtimeapi.UInt64Value{Value: used}, InodesUsed: &runtimeapi.UInt64Value{Value: inodes}}
}

func TestImageFSStatsTheMountpointTheRuntimeNames(t *testing.T) {
	clk := &clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	rt := &fakeImageFSInfo{fss: []*runtimeapi.FilesystemUsage{fsUsage("/var/lib/containerd/snapshots", 7<<30, 900), fsUsage("/second", 1, 1)}}
	var asked []string
	var mu sync.Mutex
	f := &ImageFS{Runtime: rt, Now: clk.Now, StatFS: func(path string) (nodestats.FSStats, error) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, path)
		return nodestats.FSStats{Path: path, CapacityBytes: 100 << 30, AvailableBytes: 40 << 30, Inodes: 1000, InodesFree: 100}, nil
	}}
	st, err := f.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := ImageFSStats{FSStats: nodestats.FSStats{Path: "/var/lib/containerd/snapshots", CapacityBytes: 100 << 30, AvailableBytes: 40 << 30, Inodes: 1000, InodesFree: 100},
		Mountpoint: "/var/lib/containerd/snapshots", UsedBytes: 7 << 30, InodesUsed: 900, HasUsed: true}
	if st != want {
		t.Errorf("Stats = %+v, want %+v", st, want)
	}
	// The runtime is asked once per refresh; statfs every time.
	for range 3 {
		if _, err := f.FSStats(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	clk.advance(DefaultImageFSRefresh)
	if _, err := f.FSStats(t.Context()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if rt.calls != 2 || len(asked) != 5 {
		t.Errorf("%d ImageFsInfo calls and %d statfs for 5 Stats over one refresh, want 2 and 5", rt.calls, len(asked))
	}
}

func TestImageFSErrors(t *testing.T) {
	statfsErr := errors.New("statfs /images: input/output error")
	for _, tc := range []struct {
		name   string
		rt     *fakeImageFSInfo
		statfs error
		is     error
		want   string
	}{
		{"no image filesystem", &fakeImageFSInfo{}, nil, ErrNoImageFS, "image filesystem: the runtime reports no image filesystem"},
		{"no mountpoint", &fakeImageFSInfo{fss: []*runtimeapi.FilesystemUsage{{}}}, nil, ErrNoImageFS, "the first has no mountpoint"},
		{"the runtime fails", &fakeImageFSInfo{err: context.DeadlineExceeded}, nil, context.DeadlineExceeded, "image filesystem: context deadline exceeded"},
		{"statfs fails", &fakeImageFSInfo{fss: []*runtimeapi.FilesystemUsage{fsUsage("/images", 1, 1)}}, statfsErr, statfsErr, "image filesystem: statfs /images"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &ImageFS{Runtime: tc.rt, StatFS: func(string) (nodestats.FSStats, error) {
				return nodestats.FSStats{CapacityBytes: 1}, tc.statfs
			}}
			st, err := f.FSStats(t.Context())
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("FSStats: %v, want %v with %q", err, tc.is, tc.want)
			}
			if st != (nodestats.FSStats{}) {
				t.Errorf("FSStats on error = %+v, want nothing (never zeros taken for a reading)", st)
			}
		})
	}
}

// TestImageFSAHungFilesystemIsUnknownNotAHang: a statfs of the mountpoint
// that does not return leaves the imagefs signals out within the probe's
// bound, and the next call does not start a second statfs.
func TestImageFSAHungFilesystemIsUnknownNotAHang(t *testing.T) {
	rt := &fakeImageFSInfo{fss: []*runtimeapi.FilesystemUsage{fsUsage("/hung", 1, 1)}}
	release := make(chan struct{})
	defer close(release)
	var mu sync.Mutex
	calls := 0
	f := &ImageFS{Runtime: rt, StatFSTimeout: 20 * time.Millisecond, StatFS: func(path string) (nodestats.FSStats, error) {
		mu.Lock()
		calls++
		mu.Unlock()
		<-release
		return nodestats.FSStats{}, errors.New("released")
	}}
	for range 2 {
		if _, err := f.FSStats(t.Context()); !errors.Is(err, nodestats.ErrTimeout) {
			t.Fatalf("FSStats on a hung filesystem: %v, want nodestats.ErrTimeout", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 1 {
		t.Errorf("%d statfs calls in flight on a hung filesystem, want 1", calls)
	}
}
