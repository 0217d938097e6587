package mounts

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// apiDataVolumeMode is the root mode of the tmpfs of secret and projected
// volumes: read-only for containers anyway (Mounts forces it), searchable
// by any container user.
const apiDataVolumeMode = 0o755

// PodVolumes is the outcome of Setup for one pod: where each of its volumes
// is on the host. Mounts turns it into one container's CRI mounts.
type PodVolumes struct {
	m       *Volumes
	uid     types.UID
	podDir  string
	volumes map[string]*volume
}

// volume is one prepared volume of a pod.
type volume struct {
	name   string
	plugin string
	// path is the host path handed to the runtime: the volume directory,
	// or for a hostPath the bind mount of the object that was checked.
	path string
	// readOnly volumes are mounted read-only whatever the volumeMount says:
	// the kubelet's API data volumes (configMap, secret, projected,
	// downwardAPI), whose content the node owns.
	readOnly bool
	// createSubPaths: a missing subPath is made as a directory (as the
	// kubelet does) only in volumes the pod writes; in API data volumes it
	// is an error.
	createSubPaths bool
	// block volumes (a claim of volumeMode Block) are devices for
	// volumeDevices, never mounts; path is the mapped device.
	block bool
	// image is the reference of an image volume: the runtime mounts the
	// image (CRI Mount.image), there is nothing on the host (path is "").
	image string
}

// volumePlugin returns the plugin directory name of a volume source, or ""
// for a source this package does not handle.
func volumePlugin(s *corev1.VolumeSource) string {
	switch {
	case s.EmptyDir != nil:
		return PluginEmptyDir
	case s.HostPath != nil:
		return PluginHostPath
	case s.ConfigMap != nil:
		return PluginConfigMap
	case s.Secret != nil:
		return PluginSecret
	case s.Projected != nil:
		return PluginProjected
	case s.DownwardAPI != nil:
		return PluginDownwardAPI
	case s.NFS != nil:
		return PluginNFS
	}
	return ""
}

// Setup makes every volume of pod ready and returns where they are. It is
// idempotent and meant to be called on every sync of the pod:
//
//   - it validates the pod first (Validate) and refuses it whole on any
//     error;
//   - emptyDir: a 0777 directory; with medium Memory a tmpfs (nosuid,
//     nodev) sized by memoryVolumeSize is mounted on it once;
//   - hostPath: the path is checked against the allowlist and its type
//     (the OrCreate types are made) and the object checked is bind
//     mounted, through its descriptor, beneath the pod (setupHostPath);
//   - nfs: the export mounted with mount(8) on a 0750 directory, from the
//     node's network namespace, within NFSMountTimeout (setupNFS);
//   - persistentVolumeClaim: the claim's bound volume, mounted (or mapped,
//     for volumeMode Block) by setupClaim;
//   - image: nothing: the runtime mounts the image (Mounts);
//   - configMap and downwardAPI: a directory on disk; secret and projected
//     (which may carry secrets) a tmpfs, so that secrets never reach the
//     disk; each is filled by the atomic writer, which rewrites it only when
//     its content changed.
//
// Directories are made with mkdirat(2) beneath RootDir/pods. On error, what
// was made is left in place for the next Setup to reuse or for Teardown to
// remove. ctx is checked between volumes.
func (m *Volumes) Setup(ctx context.Context, pod *corev1.Pod) (*PodVolumes, error) {
	what := "set up volumes of pod " + pod.Namespace + "/" + pod.Name
	if errs := m.Validate(pod); len(errs) > 0 {
		return nil, fmt.Errorf("%s: %w: %w", what, ErrInvalid, errs.ToAggregate())
	}
	podsFd, err := m.openPodsDir()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer unix.Close(podsFd)
	podFd, err := mkdirAllBeneath(podsFd, string(pod.UID), podDirMode)
	if err != nil {
		return nil, fmt.Errorf("%s: make pod directory: %w", what, err)
	}
	unix.Close(podFd)

	pv := &PodVolumes{
		m:       m,
		uid:     pod.UID,
		podDir:  m.PodDir(pod.UID),
		volumes: make(map[string]*volume, len(pod.Spec.Volumes)),
	}
	for i := range pod.Spec.Volumes {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		v, err := m.setupVolume(ctx, podsFd, pod, &pod.Spec.Volumes[i])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		pv.volumes[v.name] = v
	}
	return pv, nil
}

// ErrInvalid is wrapped by Setup for a pod that Validate refuses; the
// field.ErrorList aggregate is wrapped as well.
var ErrInvalid = errors.New("invalid pod volumes")

func (m *Volumes) setupVolume(ctx context.Context, podsFd int, pod *corev1.Pod, v *corev1.Volume) (*volume, error) {
	s := &v.VolumeSource
	if s.PersistentVolumeClaim != nil {
		return m.setupClaim(ctx, podsFd, pod, v)
	}
	if s.Image != nil {
		return &volume{name: v.Name, image: s.Image.Reference, readOnly: true}, nil
	}
	plugin := volumePlugin(s)
	if s.HostPath != nil {
		return m.setupHostPath(pod, v.Name, s.HostPath, false)
	}

	if s.NFS != nil {
		return m.setupNFS(podsFd, pod, v.Name, s.NFS, nil)
	}

	rel := filepath.Join(string(pod.UID), volumesDirName, plugin, v.Name)
	dir := filepath.Join(m.podsDir, rel)
	mode := uint32(podDirMode)
	if s.EmptyDir != nil {
		mode = emptyDirMode
	}
	fd, err := mkdirAllBeneath(podsFd, rel, mode)
	if err != nil {
		return nil, volumeErr("set up", v.Name, dir, err)
	}
	defer unix.Close(fd)
	vol := &volume{name: v.Name, plugin: plugin, path: dir, readOnly: s.EmptyDir == nil}

	switch {
	case s.EmptyDir != nil:
		vol.createSubPaths = true
		if s.EmptyDir.Medium == corev1.StorageMediumMemory {
			size := memoryVolumeSize(m.nodeMemory, pod, s.EmptyDir.SizeLimit)
			if _, err := m.ensureTmpfs(fd, dir, size, emptyDirMode); err != nil {
				return nil, volumeErr("set up", v.Name, dir, err)
			}
			if err := m.ownVolume(pod, dir, false); err != nil {
				return nil, volumeErr("set up", v.Name, dir, err)
			}
			return vol, nil
		}
		// mkdirat's mode went through the umask; every container user
		// must be able to write an emptyDir.
		// Chmod through the descriptor's procfs link: the directory
		// that was opened beneath the pod root, never a path again.
		// With an fsGroup the root keeps its setgid bit (ownVolume), or
		// every Setup would undo it and OnRootMismatch would walk again.
		rootMode := uint32(emptyDirMode)
		if _, _, ok := fsGroup(pod); ok {
			rootMode |= unix.S_ISGID
		}
		if err := unix.Chmod(fdPath(fd), rootMode); err != nil {
			return nil, volumeErr("set up", v.Name, dir, err)
		}
		if err := m.ownVolume(pod, dir, false); err != nil {
			return nil, volumeErr("set up", v.Name, dir, err)
		}
		return vol, nil
	case s.Secret != nil || s.Projected != nil:
		size := memoryVolumeSize(m.nodeMemory, pod, nil)
		if _, err := m.ensureTmpfs(fd, dir, size, apiDataVolumeMode); err != nil {
			return nil, volumeErr("set up", v.Name, dir, err)
		}
	}
	pl, err := m.volumePayload(pod, v)
	if err != nil {
		return nil, volumeErr("set up", v.Name, dir, err)
	}
	changed, err := writeAtomic(dir, pl, m.now())
	if err != nil {
		return nil, volumeErr("write", v.Name, dir, err)
	}
	if err := makeNestedMountpoints(dir, v.Name, pod); err != nil {
		return nil, volumeErr("set up", v.Name, dir, err)
	}
	// The kubelet sets an API volume's ownership whenever its payload is
	// written, whatever the change policy (which it ignores for these);
	// and so here for one written before this agent started.
	if gid, _, ok := fsGroup(pod); ok {
		need := changed
		if !need {
			if need, err = needsOwnership(dir, gid, true); err != nil {
				return nil, volumeErr("set up", v.Name, dir, err)
			}
		}
		if need {
			if err := setOwnership(dir, gid, true); err != nil {
				return nil, volumeErr("set up", v.Name, dir, err)
			}
		}
	}
	if changed {
		m.log.Info("wrote volume payload", "pod_uid", string(pod.UID), "volume", v.Name, "plugin", plugin, "files", len(pl))
	}
	return vol, nil
}
