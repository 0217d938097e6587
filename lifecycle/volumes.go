package lifecycle

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// setupVolumes makes the pod's volumes ready; it runs on every sync, so a
// changed configMap or secret source reaches running containers.
func (m *Manager) setupVolumes(ctx context.Context, st *podState) error {
	if m.cfg.Volumes == nil || len(st.pod.Spec.Volumes) == 0 {
		return nil
	}
	pv, err := m.cfg.Volumes.Setup(ctx, st.pod)
	if err != nil {
		return fmt.Errorf("set up volumes: %w", err)
	}
	st.volumes = pv
	return nil
}

// containerMounts are the CRI mounts of one container.
func (m *Manager) containerMounts(st *podState, c *corev1.Container) ([]*runtimeapi.Mount, error) {
	if len(c.VolumeMounts) == 0 {
		return nil, nil
	}
	if st.volumes == nil {
		return nil, fmt.Errorf("container %s: volumes are not set up", c.Name)
	}
	ms, err := st.volumes.Mounts(c)
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", c.Name, err)
	}
	return ms, nil
}

// containerDevices are the CRI devices of one container: its raw block
// volumes.
func (m *Manager) containerDevices(st *podState, c *corev1.Container) ([]*runtimeapi.Device, error) {
	if len(c.VolumeDevices) == 0 {
		return nil, nil
	}
	if st.volumes == nil {
		return nil, fmt.Errorf("container %s: volumes are not set up", c.Name)
	}
	ds, err := st.volumes.Devices(c)
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", c.Name, err)
	}
	return ds, nil
}

// teardownVolumes unmounts and removes a pod's volumes.
func (m *Manager) teardownVolumes(ctx context.Context, uid types.UID) error {
	if m.cfg.Volumes == nil {
		return nil
	}
	return m.cfg.Volumes.Teardown(ctx, uid)
}

// gcVolumes tears down the volume directories of pods that are not
// desired: what a crash between a pod's removal and its teardown left.
// The directories are listed before the desired pods are read, so a pod
// applied in between (whose directory is made after it is desired) is
// never taken. A pod that still has a sandbox is left alone: its
// containers may still run and use the volumes (the kubelet unmounts
// only the volumes of pods whose containers have terminated); the
// teardown of its orphaned sandbox (teardownOrphans) removes them after
// it, or a later collection does.
func (m *Manager) gcVolumes(ctx context.Context) error {
	if m.cfg.Volumes == nil {
		return nil
	}
	uids, err := m.cfg.Volumes.PodDirs()
	if err != nil {
		return fmt.Errorf("volume gc: %w", err)
	}
	if len(uids) == 0 {
		return nil
	}
	cctx, cancel := call(ctx)
	sandboxes, err := m.cfg.Runtime.ListPodSandbox(cctx, map[string]string{cri.ManagedLabel: "true"})
	cancel()
	if err != nil {
		return fmt.Errorf("volume gc: list sandboxes: %w", err)
	}
	hasSandbox := make(map[types.UID]bool, len(sandboxes))
	for _, sb := range sandboxes {
		hasSandbox[types.UID(sb.GetMetadata().GetUid())] = true
	}
	m.mu.Lock()
	var orphans []types.UID
	for _, uid := range uids {
		if _, ok := m.pods[uid]; !ok && !hasSandbox[uid] {
			orphans = append(orphans, uid)
		}
	}
	m.mu.Unlock()
	for _, uid := range orphans {
		if err := m.cfg.Volumes.Teardown(ctx, uid); err != nil {
			m.log.Warn("volume gc", "uid", uid, "err", err)
			continue
		}
		m.log.Info("volume gc: orphaned pod volumes removed", "uid", uid)
	}
	return nil
}
