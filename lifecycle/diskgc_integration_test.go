package lifecycle_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lab/images"
	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/lifecycle/imagegc"
)

// envPod runs a busybox pod straight through the env's CRI (not through
// a Manager) with labels, running sleep or exiting at once, and returns
// its sandbox and container ids.
func envPod(ctx context.Context, t *testing.T, r *rig, labels map[string]string, cmd []string) (sandbox, container string) {
	t.Helper()
	rt := r.env.RuntimeClient()
	b := make([]byte, 8)
	rand.Read(b)
	uid := hex.EncodeToString(b)
	l := map[string]string{cri.PodUIDLabel: uid}
	for k, v := range labels {
		l[k] = v
	}
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "gc-" + uid, Namespace: "diskgc-test", Uid: uid},
		Labels:       l,
		LogDirectory: filepath.Join(r.env.PodsDir(), uid),
		DnsConfig:    &runtimeapi.DNSConfig{Servers: []string{"127.0.0.1"}},
		Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: r.env.CgroupParent() + "/pod" + uid},
	}
	run, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	c, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: run.GetPodSandboxId(),
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "main"},
			Image:    &runtimeapi.ImageSpec{Image: r.env.BusyboxImage()},
			Command:  cmd,
			Labels:   l,
			LogPath:  "main.log",
		},
		SandboxConfig: cfg,
	})
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.GetContainerId()}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	return run.GetPodSandboxId(), c.GetContainerId()
}

// TestDiskGCOnARealRuntime: on a real containerd, ImageFsInfo's
// mountpoint has a real capacity; the container collection removes a
// dead container and sandbox of nodeguard's that no pod needs and leaves
// another client's running pod alone; the image collection removes an
// unused image and keeps the one that pod uses and the sandbox image.
func TestDiskGCOnARealRuntime(t *testing.T) {
	r := newRig(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	t.Run("the image filesystem the runtime names has a real capacity", func(t *testing.T) {
		st, err := (&imagegc.ImageFS{Runtime: r.client}).Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(st.Mountpoint, r.env.Dir()+"/") {
			t.Errorf("mountpoint %q, want beneath the env's containerd root %s", st.Mountpoint, r.env.Dir())
		}
		var sfs unix.Statfs_t
		if err := unix.Statfs(st.Mountpoint, &sfs); err != nil {
			t.Fatal(err)
		}
		if st.CapacityBytes == 0 || st.CapacityBytes != sfs.Blocks*uint64(sfs.Frsize) || st.AvailableBytes > st.CapacityBytes {
			t.Errorf("capacity %d, available %d; statfs says %d blocks of %d", st.CapacityBytes, st.AvailableBytes, sfs.Blocks, sfs.Frsize)
		}
		// The bytes its images use are the runtime's own figure, which
		// containerd 1.6 fills in asynchronously (its snapshot stats
		// collection, every 10 s): 0 right after start. Only reported.
		if !st.HasUsed {
			t.Errorf("the runtime reports no bytes used by its images")
		}
		t.Logf("imagefs %s: %d of %d bytes available; images %d bytes, %d inodes", st.Mountpoint, st.AvailableBytes, st.CapacityBytes, st.UsedBytes, st.InodesUsed)
	})

	// Another client's pod, running: its image is in use.
	otherSandbox, otherCtr := envPod(ctx, t, r, nil, []string{"sleep", "3600"})
	// nodeguard's pod that nobody wants any more, dead: its container
	// exited, its sandbox stopped.
	deadSandbox, deadCtr := envPod(ctx, t, r, map[string]string{cri.ManagedLabel: "true"}, []string{"true"})
	rt := r.env.RuntimeClient()
	for {
		st, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: deadCtr})
		if err != nil {
			t.Fatal(err)
		}
		if st.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_EXITED {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the container never exited: %v", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: deadSandbox}); err != nil {
		t.Fatal(err)
	}

	t.Run("dead containers and sandboxes no pod needs are removed, nothing else", func(t *testing.T) {
		m, err := lifecycle.New(lifecycle.Config{Runtime: r.client, Cgroups: r.cg, RootDir: r.root, MemoryCapacity: 8 << 30})
		if err != nil {
			t.Fatal(err)
		}
		m.SourcesReady() // no pods desired: the dead pod is nobody's
		res, err := m.DeleteAllUnusedContainers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if res != (lifecycle.ContainerGCResult{Containers: 1, Sandboxes: 1}) {
			t.Errorf("removed %+v, want the one dead container and its sandbox", res)
		}
		if _, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: deadCtr}); err == nil {
			t.Errorf("the dead container %s is still there", deadCtr)
		}
		if _, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: deadSandbox}); err == nil {
			t.Errorf("the dead sandbox %s is still there", deadSandbox)
		}
		st, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: otherCtr})
		if err != nil || st.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Errorf("another client's container: %v %v, want it running", st.GetStatus().GetState(), err)
		}
		if _, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: otherSandbox}); err != nil {
			t.Errorf("another client's sandbox: %v", err)
		}
	})

	t.Run("an unused image is removed, the image in use and the sandbox image are kept", func(t *testing.T) {
		set, err := images.Cached(ctx, images.DefaultCacheDir, slog.New(slog.NewTextHandler(os.Stderr, nil)))
		if err != nil {
			t.Fatal(err)
		}
		if err := images.Import(ctx, r.env.Socket(), images.CRINamespace, set.Hog); err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := r.client.ImageStatus(ctx, set.Hog.Name); err == nil {
				break
			} else if !errors.Is(err, cri.ErrImageNotPresent) {
				t.Fatal(err)
			}
			select {
			case <-ctx.Done():
				t.Fatalf("the CRI never listed %s: %v", set.Hog.Name, ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
		sandboxImage, ok, err := r.client.SandboxImage(ctx)
		if err != nil || !ok || sandboxImage != r.env.PauseImage() {
			t.Errorf("SandboxImage = %q, %v, %v; want the env's %q", sandboxImage, ok, err, r.env.PauseImage())
		}
		var removed []string
		g, err := imagegc.New(imagegc.Config{
			Runtime: r.client, FS: &imagegc.ImageFS{Runtime: r.client}, Policy: imagegc.DefaultPolicy(),
			Pinned: []string{sandboxImage}, OnRemoved: func(id string, _ uint64) { removed = append(removed, id) },
		})
		if err != nil {
			t.Fatal(err)
		}
		// The first look dates what is there in the unknown past: old
		// enough to go.
		freed, err := g.DeleteUnusedImages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(removed) != 1 || freed <= 0 {
			t.Errorf("removed %v (%d bytes), want the hog image alone", removed, freed)
		}
		if _, err := r.client.ImageStatus(ctx, set.Hog.Name); !errors.Is(err, cri.ErrImageNotPresent) {
			t.Errorf("the unused hog image: %v, want it gone", err)
		}
		for _, keep := range []string{r.env.BusyboxImage(), r.env.PauseImage()} {
			if _, err := r.client.ImageStatus(ctx, keep); err != nil {
				t.Errorf("%s: %v, want it kept", keep, err)
			}
		}
		t.Logf("image gc freed %d bytes: %v", freed, removed)
	})
}
