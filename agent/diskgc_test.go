package agent

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/config"
	"github.com/nodeguard/nodeguard/eviction"
	"github.com/nodeguard/nodeguard/lifecycle/imagegc"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// fakeImageFSRuntime reports one image filesystem at mountpoint.
type fakeImageFSRuntime struct {
	mountpoint string
}

func (f *fakeImageFSRuntime) ImageFsInfo(context.Context) ([]*runtimeapi.FilesystemUsage, error) {
	return []*runtimeapi.FilesystemUsage{{
		FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: f.mountpoint},
		UsedBytes:  &runtimeapi.UInt64Value{Value: 80 << 30},
		InodesUsed: &runtimeapi.UInt64Value{Value: 1000},
	}}, nil
}

func (f *fakeImageFSRuntime) SandboxImage(context.Context) (string, bool, error) {
	return "registry.local/pause:3.9", true, nil
}

func (f *fakeImageFSRuntime) ImageStatus(_ context.Context, ref string) (*runtimeapi.Image, error) {
	return &runtimeapi.Image{Id: "sha256:pause", RepoTags: []string{ref}}, nil
}

func (f *fakeImageFSRuntime) ListImages(context.Context) ([]*runtimeapi.Image, error) {
	return nil, nil
}
func (f *fakeImageFSRuntime) RemoveImage(context.Context, string) error { return nil }
func (f *fakeImageFSRuntime) ListAllContainers(context.Context) ([]*runtimeapi.Container, error) {
	return nil, nil
}

// TestRunSensesTheImageFilesystemTheRuntimeNames: the snapshots `nodeguard
// run` evaluates carry imagefs.available and imagefs.inodesFree, from
// statfs of the mountpoint CRI ImageFsInfo names, so that the kubelet's
// default imagefs.available<15% can fire. Before, run observed no image
// filesystem at all.
func TestRunSensesTheImageFilesystemTheRuntimeNames(t *testing.T) {
	cgtest.RequirePrivileged(t) // sensing opens PSI triggers
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	rootDir := t.TempDir()
	rt := &fakeImageFSRuntime{mountpoint: "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs"}
	var mu sync.Mutex
	var asked []string
	// statfs of the mountpoint: 100 GiB, 10 GiB available (10% < 15%).
	statfs := func(path string) (nodestats.FSStats, error) {
		mu.Lock()
		asked = append(asked, path)
		mu.Unlock()
		return nodestats.FSStats{Path: path, CapacityBytes: 100 << 30, FreeBytes: 11 << 30, AvailableBytes: 10 << 30,
			Inodes: 1 << 20, InodesFree: 1 << 19}, nil
	}
	disk, err := newDiskGC(ctx, rt, &imagegc.ImageFS{Runtime: rt, StatFS: statfs}, nil, config.Default(), rootDir, log)
	if err != nil {
		t.Fatal(err)
	}
	// The sensing flags as runDaemon sets them for the snapshot.
	sf := &senseFlags{rootDir: rootDir, noBPF: true, tick: time.Second, imageFSStats: disk.imageFS.FSStats}
	s, err := startSensing(ctx, sf, log)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	snap := s.snapper.Snapshot(ctx, time.Now())

	avail, ok := snap.Signal(nodestats.SignalImageFsAvailable)
	if !ok {
		t.Fatalf("no imagefs.available in run's snapshot (signals %v, errors %v)", snap.Signals, snap.Errors)
	}
	if avail.Available != 10<<30 || avail.Capacity != 100<<30 {
		t.Errorf("imagefs.available = %d of %d, want statfs's 10 GiB of 100 GiB", avail.Available, avail.Capacity)
	}
	if inodes, ok := snap.Signal(nodestats.SignalImageFsInodesFree); !ok || inodes.Available != 1<<19 || inodes.Capacity != 1<<20 {
		t.Errorf("imagefs.inodesFree = %+v (present %v), want statfs's inodes", inodes, ok)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) == 0 || asked[0] != rt.mountpoint {
		t.Errorf("statfs asked about %q, want the mountpoint ImageFsInfo names, %q", asked, rt.mountpoint)
	}

	// And the default thresholds fire on it.
	pc, err := config.Default().Eviction.Policy()
	if err != nil {
		t.Fatal(err)
	}
	pol, err := eviction.NewPolicy(pc)
	if err != nil {
		t.Fatal(err)
	}
	sigs := map[nodestats.Signal]nodestats.Observation{}
	for _, o := range snap.Signals {
		sigs[o.Signal] = o
	}
	res := pol.Evaluate(eviction.Observations{Time: snap.Time, Signals: sigs}, snap.Time)
	met := false
	for _, m := range res.Met {
		met = met || m.Threshold == "imagefs.available<15%"
	}
	if !met || !res.Conditions[eviction.DiskPressure] {
		t.Errorf("imagefs.available<15%% met %v, DiskPressure %v; want both (met: %+v)", met, res.Conditions[eviction.DiskPressure], res.Met)
	}
}
