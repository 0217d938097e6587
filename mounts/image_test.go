package mounts

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestImageVolumeIsTheRuntimes checks that an image volume makes nothing
// on the node and becomes a CRI image mount: no host path, the reference,
// read-only whatever the volumeMount says, a subPath as ImageSubPath.
func TestImageVolumeIsTheRuntimes(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	pod := newPod("img", []corev1.Volume{
		{Name: "tools", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "registry.example/tools:1", PullPolicy: corev1.PullIfNotPresent}}},
	}, mountAll(corev1.Container{Name: "app"},
		corev1.VolumeMount{Name: "tools", MountPath: "/tools"},
		corev1.VolumeMount{Name: "tools", MountPath: "/bin-only", SubPath: "usr/bin", MountPropagation: ptr(corev1.MountPropagationHostToContainer)}))
	if errs := env.m.Validate(pod); len(errs) > 0 {
		t.Fatalf("Validate: %v", errs)
	}
	pv, err := env.m.Setup(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(env.m.PodDir("img"), volumesDirName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an image volume is materialised beneath the pod: %v", err)
	}
	ms, err := pv.Mounts(&pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	image := &runtimeapi.ImageSpec{Image: "registry.example/tools:1", UserSpecifiedImage: "registry.example/tools:1"}
	want := []*runtimeapi.Mount{
		{ContainerPath: "/tools", Image: image, Readonly: true, Propagation: runtimeapi.MountPropagation_PROPAGATION_PRIVATE},
		{ContainerPath: "/bin-only", Image: image, ImageSubPath: "usr/bin", Readonly: true, Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER},
	}
	if len(ms) != len(want) {
		t.Fatalf("Mounts = %v, want %v", ms, want)
	}
	for i := range want {
		if !proto.Equal(ms[i], want[i]) {
			t.Errorf("mount %d = %v, want %v", i, ms[i], want[i])
		}
	}
	if err := env.m.Teardown(ctx, "img"); err != nil {
		t.Fatal(err)
	}
}

// TestImageVolumeWithoutReferenceIsRefused checks the volume code's own
// check, and that an image volume counts as the volume's one type.
func TestImageVolumeWithoutReferenceIsRefused(t *testing.T) {
	env := newEnv(t)
	pod := newPod("img", []corev1.Volume{
		{Name: "none", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{}}},
		{Name: "two", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "a:1"}, EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	})
	errs := env.m.Validate(pod)
	got := make([]string, len(errs))
	for i, e := range errs {
		got[i] = e.Error()
	}
	want := []string{"spec.volumes[0].image.reference: Required value", "spec.volumes[1]: Forbidden: may not specify more than 1 volume type"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("Validate = %q, want %q", got, want)
	}
}
