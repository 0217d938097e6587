// Image volumes (KEP-4639, volumes[].image): the runtime mounts an image
// read-only into a container, and nodeguard resolves the image first, as
// the kubelet's kuberuntime does before it creates a container.

package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// volumePullKey is an image volume's back-off in podState.pulls. Volume
// and container names are both DNS labels, which have no space: the two
// never meet.
func volumePullKey(volume string) string { return "volume " + volume }

// ensureImageVolumes resolves the image of every image volume c mounts by
// the volume's pullPolicy, through the same path as c's own image
// (ensure: the pod's imagePullSecrets, then the node's credentials; the
// kubelet's events; the back-off), and returns per volume name the image
// to hand the runtime (mountName). A volume whose image cannot be had
// stops c alone, with ErrImagePull, ImagePullBackOff or ErrImageNeverPull
// as its waiting reason, as the kubelet reports an image volume's pull
// error on each container that mounts it; the back-off is the volume's,
// whichever container asks. The image IDs are recorded for the image
// collector (ImageVolumeImages). A pull policy of Always pulls at each
// start of a container that mounts the volume, as the kubelet pulls at
// each SyncPod that starts one.
func (m *Manager) ensureImageVolumes(ctx context.Context, st *podState, c *corev1.Container) (map[string]string, error) {
	var out map[string]string
	for _, vm := range c.VolumeMounts {
		src := imageVolume(st.pod, vm.Name)
		if src == nil || out[vm.Name] != "" {
			continue
		}
		id, err := m.ensure(ctx, st, imageWant{container: c.Name, image: src.Reference, policy: src.PullPolicy, key: volumePullKey(vm.Name)})
		if err != nil {
			if ie, ok := errors.AsType[*imageError](err); ok {
				ie.err = fmt.Errorf("image volume %s: %w", vm.Name, ie.err)
				return nil, ie
			}
			return nil, fmt.Errorf("container %s: image volume %s: %w", c.Name, vm.Name, err)
		}
		name, err := m.mountName(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("container %s: image volume %s: %w", c.Name, vm.Name, err)
		}
		if out == nil {
			out = map[string]string{}
		}
		out[vm.Name] = name
		m.mu.Lock()
		if st.imageVolumes == nil {
			st.imageVolumes = map[string]string{}
		}
		st.imageVolumes[vm.Name] = id
		m.mu.Unlock()
	}
	return out, nil
}

// imageVolume is the image source of the pod's volume name, nil when the
// volume is of another type.
func imageVolume(p *corev1.Pod, name string) *corev1.ImageVolumeSource {
	for i := range p.Spec.Volumes {
		if v := &p.Spec.Volumes[i]; v.Name == name {
			return v.Image
		}
	}
	return nil
}

// mountName is the name of image id that the runtime mounts. containerd
// looks an image mount's image up in its image store by name
// (ImageService.Get), and an image ID is a name there only for images its
// CRI pulled, not for those imported with ctr: the image's first tag,
// else its first digest reference, names it in both cases.
func (m *Manager) mountName(ctx context.Context, id string) (string, error) {
	cctx, cancel := call(ctx)
	defer cancel()
	img, err := m.cfg.Runtime.ImageStatus(cctx, id)
	if err != nil {
		return "", err
	}
	if t := img.GetRepoTags(); len(t) > 0 {
		return t[0], nil
	}
	if d := img.GetRepoDigests(); len(d) > 0 {
		return d[0], nil
	}
	return id, nil
}

// resolveImageMounts names in each image mount of c (mounts.PodVolumes
// gives them in c.VolumeMounts' order, each naming its volume's reference
// as written) the image ensureImageVolumes resolved. An image mount left
// unresolved is an error: the runtime would resolve the reference itself,
// bypassing the pull policy.
func resolveImageMounts(c *corev1.Container, ms []*runtimeapi.Mount, images map[string]string) error {
	for i, vm := range c.VolumeMounts {
		if i >= len(ms) || ms[i].GetImage() == nil {
			continue
		}
		name, ok := images[vm.Name]
		if !ok {
			return fmt.Errorf("container %s: volumeMounts[%d]: image volume %s was not resolved", c.Name, i, vm.Name)
		}
		ms[i].Image.Image = name
	}
	return nil
}

// ImageVolumeImages returns the images the image volumes of the pods
// nodeguard runs mount: in use for the image collector
// (ImageGCConfig.InUse), as a container's image is, although no container
// names them. The runtime keeps the mounted snapshot of a removed image,
// but the next container of the pod would pull it again. They are the IDs
// the volumes were resolved to and, for a pod adopted after a restart
// whose containers have not started since, the references as written
// (which the collector matches to an image's tags and digests).
func (m *Manager) ImageVolumeImages() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	add := func(ref string) {
		if ref != "" && !slices.Contains(out, ref) {
			out = append(out, ref)
		}
	}
	for _, st := range m.pods {
		for _, v := range st.pod.Spec.Volumes {
			if v.Image != nil {
				add(v.Image.Reference)
			}
		}
		for _, id := range st.imageVolumes {
			add(id)
		}
	}
	return out
}
