package podspec

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestImageVolumes checks image volumes against the node: accepted where
// the runtime mounts them, refused with the runtime's name and what it
// lacks where it does not, and a subPath only where the runtime mounts
// one.
func TestImageVolumes(t *testing.T) {
	old := Options{ImagePull: true, Runtime: "containerd 1.6.20~ds1"}
	v21 := Options{ImagePull: true, ImageVolumes: true, Runtime: "containerd v2.1.5"}
	v22 := Options{ImagePull: true, ImageVolumes: true, ImageVolumeSubPath: true, Runtime: "containerd v2.4.2"}
	withVolume := func(src corev1.ImageVolumeSource, mount corev1.VolumeMount) func(p *corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "tools", VolumeSource: corev1.VolumeSource{Image: &src}})
			mount.Name = "tools"
			p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, mount)
		}
	}
	plain := withVolume(corev1.ImageVolumeSource{Reference: "registry.example/tools:1", PullPolicy: corev1.PullIfNotPresent},
		corev1.VolumeMount{MountPath: "/tools"})
	tests := []struct {
		name     string
		opts     Options
		mutate   func(p *corev1.Pod)
		wantErrs []string
	}{
		{
			name:   "an image volume is accepted where the runtime mounts image volumes",
			opts:   v21,
			mutate: plain,
		},
		{
			name:   "a volumeMount of it that is not readOnly is accepted: the volume is mounted read-only anyway, as by the kubelet",
			opts:   v21,
			mutate: withVolume(corev1.ImageVolumeSource{Reference: "registry.example/tools:1", PullPolicy: corev1.PullNever}, corev1.VolumeMount{MountPath: "/tools", ReadOnly: false}),
		},
		{
			name:   "an image volume is refused, naming the runtime and what it needs, where the runtime predates CRI image mounts",
			opts:   old,
			mutate: plain,
			wantErrs: []string{"spec.volumes[0].image: Forbidden: not supported by nodeguard: the runtime (containerd 1.6.20~ds1) cannot mount image volumes: " +
				"image volumes need a runtime that mounts CRI Mount.image (containerd 2.1 or later); one that does not ignores the field and the container would see an empty directory"},
		},
		{
			name: "a subPath of an image volume is refused where the runtime mounts image volumes but no subPath of one",
			opts: v21,
			mutate: withVolume(corev1.ImageVolumeSource{Reference: "registry.example/tools:1", PullPolicy: corev1.PullIfNotPresent},
				corev1.VolumeMount{MountPath: "/tools", SubPath: "bin"}),
			wantErrs: []string{"spec.containers[0].volumeMounts[0].subPath: Forbidden: not supported by nodeguard: the runtime (containerd v2.1.5) cannot mount a subPath of an image volume: " +
				"a subPath of an image volume needs a runtime that mounts CRI Mount.image_sub_path (containerd 2.2 or later)"},
		},
		{
			name: "a subPath of an image volume is accepted where the runtime mounts one",
			opts: v22,
			mutate: withVolume(corev1.ImageVolumeSource{Reference: "registry.example/tools:1", PullPolicy: corev1.PullIfNotPresent},
				corev1.VolumeMount{MountPath: "/tools", SubPath: "bin"}),
		},
		{
			name: "pullPolicy Always is refused on a node that does not pull, as a container's",
			opts: Options{ImageVolumes: true, Runtime: "containerd v2.4.2"},
			mutate: withVolume(corev1.ImageVolumeSource{Reference: "registry.example/tools:1", PullPolicy: corev1.PullAlways},
				corev1.VolumeMount{MountPath: "/tools"}),
			wantErrs: []string{"spec.volumes[0].image.pullPolicy: Forbidden: Always pulls at every start, and this node does not pull images (imagePull: false in nodeguard's config): use IfNotPresent or Never, or set imagePull: true"},
		},
		{
			name:     "a reference is required",
			opts:     v22,
			mutate:   withVolume(corev1.ImageVolumeSource{PullPolicy: corev1.PullIfNotPresent}, corev1.VolumeMount{MountPath: "/tools"}),
			wantErrs: []string{"spec.volumes[0].image.reference: Required value"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := base(t)
			tt.mutate(p)
			_, errs := Validate(p, tt.opts)
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
			}
			if !slices.Equal(got, tt.wantErrs) {
				t.Errorf("errors\ngot  %q\nwant %q", got, tt.wantErrs)
			}
		})
	}
}

// TestImageVolumePullPolicyDefault checks that Default gives an image
// volume the pull policy a container with the same image gets.
func TestImageVolumePullPolicyDefault(t *testing.T) {
	for ref, want := range map[string]corev1.PullPolicy{
		"registry.example/tools":                           corev1.PullAlways,
		"registry.example/tools:latest":                    corev1.PullAlways,
		"registry.example/tools:1":                         corev1.PullIfNotPresent,
		"registry.example:5000/tools@sha256:" + sha256Zero: corev1.PullIfNotPresent,
	} {
		p := base(t)
		p.Spec.Volumes = []corev1.Volume{{Name: "tools", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: ref}}}}
		Default(p, "test")
		if got := p.Spec.Volumes[0].Image.PullPolicy; got != want {
			t.Errorf("%s: pullPolicy %q, want %q", ref, got, want)
		}
	}
}

const sha256Zero = "0000000000000000000000000000000000000000000000000000000000000000"
