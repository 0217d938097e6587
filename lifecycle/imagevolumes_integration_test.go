package lifecycle_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/lab/images"
	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// imageVolumePod mounts the busybox image as a volume and prints a file
// of it: its /etc/group, whose bytes lab/images knows.
const imageVolumePod = `
apiVersion: v1
kind: Pod
metadata: {name: imagevol}
spec:
  restartPolicy: Never
  containers:
  - name: cat
    image: BUSYBOX
    command: [cat, /volume/etc/group]
    volumeMounts:
    - {name: content, mountPath: /volume}
  volumes:
  - name: content
    image: {reference: BUSYBOX, pullPolicy: Never}
`

// TestImageVolumesFollowTheRuntime gives the manager what the real
// runtime's version says of image volumes, as the daemon does: where the
// runtime mounts none (Debian's containerd 1.6.20, this host's) the pod
// is refused at Apply, naming the runtime and what it needs, and nothing
// of it is desired; where it mounts them, the container reads the image's
// file. The node lane runs it on containerd 2.4.2
// (lab/nodelane/imagevolume_test.go).
func TestImageVolumesFollowTheRuntime(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	iv := cri.ImageVolumesOf(r.client.Runtime())
	r.podOptions.ImageVolumes, r.podOptions.ImageVolumeSubPath, r.podOptions.Runtime = iv.Mount, iv.SubPath, iv.Runtime
	m, _ := r.manager(t)
	_, err := m.Apply(ctx, r.pods(t, imageVolumePod), lifecycle.SourceAPI)
	if !iv.Mount {
		want := "spec.volumes[0].image: Forbidden: not supported by nodeguard: the runtime (" + iv.Runtime + ") cannot mount image volumes: " +
			"image volumes need a runtime that mounts CRI Mount.image (containerd 2.1 or later)"
		if !errors.Is(err, lifecycle.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Fatalf("Apply = %v, want ErrInvalid with %q", err, want)
		}
		if _, ok := m.Get("default", "imagevol"); ok {
			t.Error("a rejected pod is desired")
		}
		t.Logf("the runtime (%s) mounts no image volume: %v", iv.Runtime, err)
		return
	}
	if err != nil {
		t.Fatalf("the runtime (%s) mounts image volumes, yet Apply = %v", iv.Runtime, err)
	}
	waitPod(t, m, "imagevol", "succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	var out strings.Builder
	if err := m.Logs(ctx, "default", "imagevol", lifecycle.LogOptions{Container: "cat", Tail: -1}, &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != images.BusyboxGroup {
		t.Errorf("the container read %q from the image volume, want %q", out.String(), images.BusyboxGroup)
	}
	if err := m.Delete(ctx, "default", "imagevol"); err != nil {
		t.Fatal(err)
	}
	waitGone(t, m, "imagevol")
}
