package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// volumeImageRuntime holds one image, imported under its tag (as the
// node lane imports its images with ctr), and refuses to pull: the rest
// of Runtime is not used by ensureImageVolumes.
type volumeImageRuntime struct {
	Runtime
	tag, id  string
	resolved []string // each ResolveImage's reference and policy
}

func (r *volumeImageRuntime) ResolveImage(_ context.Context, ref string, policy corev1.PullPolicy) (string, bool, error) {
	r.resolved = append(r.resolved, ref+" "+string(policy))
	if ref != r.tag {
		return "", false, fmt.Errorf("container image %q is not present with pull policy of Never: %w", ref, cri.ErrImageNeverPull)
	}
	return r.id, false, nil
}

func (r *volumeImageRuntime) ImageStatus(_ context.Context, ref string) (*runtimeapi.Image, error) {
	if ref != r.id {
		return nil, fmt.Errorf("image status %s: %w", ref, cri.ErrImageNotPresent)
	}
	return &runtimeapi.Image{Id: r.id, RepoTags: []string{r.tag}}, nil
}

func imageVolumePod(ref string) *corev1.Pod {
	return &corev1.Pod{Spec: corev1.PodSpec{
		Containers: []corev1.Container{
			{Name: "reader", VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/tmp"}, {Name: "content", MountPath: "/content"}}},
			{Name: "other", VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/tmp"}}},
		},
		Volumes: []corev1.Volume{
			{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "content", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: ref, PullPolicy: corev1.PullNever}}},
		},
	}}
}

// TestImageVolumesAreResolvedByTheirPullPolicy: the image of an image
// volume is resolved with the volume's pull policy, handed to the runtime
// by a name its image store knows, and kept from the image collector; one
// that cannot be had stops only the containers that mount it, with the
// kubelet's reason.
func TestImageVolumesAreResolvedByTheirPullPolicy(t *testing.T) {
	newManager := func(rt Runtime) *Manager {
		return &Manager{cfg: Config{Runtime: rt, BackoffInitial: 10 * time.Second, BackoffMax: 40 * time.Second},
			log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: time.Now, pods: map[types.UID]*podState{}}
	}
	t.Run("a present image is mounted by its tag and is in use for the image collector", func(t *testing.T) {
		rt := &volumeImageRuntime{tag: "registry.local/nodeguard/busybox:1.35", id: "sha256:aaaa"}
		m := newManager(rt)
		st := &podState{pod: imageVolumePod("registry.local/nodeguard/busybox:1.35")}
		m.pods["p"] = st
		c := &st.pod.Spec.Containers[0]
		images, err := m.ensureImageVolumes(t.Context(), st, c)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"registry.local/nodeguard/busybox:1.35 Never"}; !slices.Equal(rt.resolved, want) {
			t.Errorf("resolved %q, want %q", rt.resolved, want)
		}
		ms := []*runtimeapi.Mount{
			{ContainerPath: "/tmp", HostPath: "/var/lib/nodeguard/pods/p/volumes/kubernetes.io~empty-dir/scratch"},
			{ContainerPath: "/content", Readonly: true, Image: &runtimeapi.ImageSpec{Image: "registry.local/nodeguard/busybox:1.35", UserSpecifiedImage: "registry.local/nodeguard/busybox:1.35"}},
		}
		if err := resolveImageMounts(c, ms, images); err != nil {
			t.Fatal(err)
		}
		if got := ms[1].GetImage().GetImage(); got != "registry.local/nodeguard/busybox:1.35" {
			t.Errorf("image mount names %q, want the image's tag", got)
		}
		if ms[0].GetImage() != nil {
			t.Errorf("the emptyDir mount became an image mount: %v", ms[0])
		}
		if got, want := m.ImageVolumeImages(), []string{"registry.local/nodeguard/busybox:1.35", "sha256:aaaa"}; !slices.Equal(got, want) {
			t.Errorf("ImageVolumeImages = %q, want the volume's reference and its image's ID %q", got, want)
		}
	})
	t.Run("a missing image under Never stops the container that mounts it with ErrImageNeverPull, not the others", func(t *testing.T) {
		rt := &volumeImageRuntime{tag: "registry.local/nodeguard/busybox:1.35", id: "sha256:aaaa"}
		m := newManager(rt)
		st := &podState{pod: imageVolumePod("registry.local/nodeguard/missing:1")}
		_, err := m.ensureImageVolumes(t.Context(), st, &st.pod.Spec.Containers[0])
		ie, ok := errors.AsType[*imageError](err)
		if !ok || ie.container != "reader" || ie.reason != ReasonErrImageNeverPull {
			t.Fatalf("err = %v, want reader's ErrImageNeverPull", err)
		}
		if want := `container reader: ErrImageNeverPull: image volume content: container image "registry.local/nodeguard/missing:1" is not present with pull policy of Never`; err.Error()[:len(want)] != want {
			t.Errorf("err = %q, want it to start with %q", err, want)
		}
		if images, err := m.ensureImageVolumes(t.Context(), st, &st.pod.Spec.Containers[1]); err != nil || images != nil {
			t.Errorf("a container that does not mount it: %v, %v", images, err)
		}
	})
	t.Run("an image mount left unresolved is an error, not the runtime's resolution", func(t *testing.T) {
		st := &podState{pod: imageVolumePod("registry.local/nodeguard/busybox:1.35")}
		ms := []*runtimeapi.Mount{{ContainerPath: "/tmp"}, {ContainerPath: "/content", Readonly: true, Image: &runtimeapi.ImageSpec{Image: "x"}}}
		if err := resolveImageMounts(&st.pod.Spec.Containers[0], ms, nil); err == nil {
			t.Fatal("resolveImageMounts passed an unresolved image mount")
		}
	})
}
