package mounts

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Mounts returns the CRI mounts of container c, one per volumeMount in
// order: the volume's host path (for a hostPath volume, the bind mount of
// the object Setup checked; with a subPath, a bind mount in the volume),
// the container path, read-only when the volumeMount or the volume asks
// (configMap, secret, projected and downwardAPI volumes always are), the
// mount propagation, and no SELinux relabelling.
//
// A subPath is resolved beneath the volume's root with openat2
// RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS, so no symlink inside the volume can
// make it name something outside; the object that was opened is then bind
// mounted through its procfs descriptor link onto
// RootDir/pods/<uid>/volume-subpaths/<volume>/<container>/<index>, which is
// returned as the host path. A missing subPath is made as a directory in
// emptyDir and hostPath volumes (as the kubelet does) and is an error in the
// others. Calling Mounts again reuses a bind mount that still shows the
// same object and replaces one that does not.
//
// An image volume is the runtime's to mount, as the kubelet's makeMounts
// hands it over: no host path, Image naming the volume's reference as
// written, always read-only, and a subPath as ImageSubPath, which the
// runtime resolves inside the image. The caller resolves the reference
// (its pull policy) and may name the resolved image in Image.Image.
func (pv *PodVolumes) Mounts(c *corev1.Container) ([]*runtimeapi.Mount, error) {
	out := make([]*runtimeapi.Mount, 0, len(c.VolumeMounts))
	for i, vm := range c.VolumeMounts {
		v, ok := pv.volumes[vm.Name]
		if !ok {
			return nil, fmt.Errorf("mounts of container %s: volumeMounts[%d]: %w: %q", c.Name, i, ErrUnknownVolume, vm.Name)
		}
		if v.block {
			return nil, fmt.Errorf("mounts of container %s: volumeMounts[%d]: volume %q is a raw block volume (volumeMode Block): use it in volumeDevices", c.Name, i, vm.Name)
		}
		prop, err := propagation(c, vm.MountPropagation)
		if err != nil {
			return nil, fmt.Errorf("mounts of container %s: volumeMounts[%d]: %w", c.Name, i, volumeErr("mount", vm.Name, v.path, err))
		}
		if v.image != "" {
			out = append(out, &runtimeapi.Mount{
				ContainerPath: vm.MountPath,
				Image:         &runtimeapi.ImageSpec{Image: v.image, UserSpecifiedImage: v.image},
				ImageSubPath:  vm.SubPath,
				Readonly:      true,
				Propagation:   prop,
			})
			continue
		}
		host := v.path
		if vm.SubPath != "" {
			host, err = pv.bindSubPath(v, c.Name, i, vm.SubPath)
			if err != nil {
				return nil, fmt.Errorf("mounts of container %s: volumeMounts[%d]: %w", c.Name, i, err)
			}
		}
		out = append(out, &runtimeapi.Mount{
			ContainerPath:  vm.MountPath,
			HostPath:       host,
			Readonly:       vm.ReadOnly || v.readOnly,
			Propagation:    prop,
			SelinuxRelabel: false,
		})
	}
	return out, nil
}

// Devices returns the CRI devices of container c, one per volumeDevice in
// order: the raw block volume's mapped path beneath the pod's
// volumeDevices directory as the host path (containerd makes the device
// node in the container from its type and numbers), the devicePath in the
// container, and the kubelet's permissions: "mrw", or "r" for a claim
// mounted readOnly.
func (pv *PodVolumes) Devices(c *corev1.Container) ([]*runtimeapi.Device, error) {
	out := make([]*runtimeapi.Device, 0, len(c.VolumeDevices))
	for i, vd := range c.VolumeDevices {
		v, ok := pv.volumes[vd.Name]
		if !ok {
			return nil, fmt.Errorf("devices of container %s: volumeDevices[%d]: %w: %q", c.Name, i, ErrUnknownVolume, vd.Name)
		}
		if !v.block {
			return nil, fmt.Errorf("devices of container %s: volumeDevices[%d]: volume %q is not a raw block volume: its claim's volume has volumeMode Filesystem; use it in volumeMounts", c.Name, i, vd.Name)
		}
		perm := "mrw"
		if v.readOnly {
			perm = "r"
		}
		out = append(out, &runtimeapi.Device{ContainerPath: vd.DevicePath, HostPath: v.path, Permissions: perm})
	}
	return out, nil
}

// propagation maps a volumeMount's mountPropagation to CRI's. Bidirectional
// needs a privileged container: it lets the container's mounts reach the
// host.
func propagation(c *corev1.Container, p *corev1.MountPropagationMode) (runtimeapi.MountPropagation, error) {
	if p == nil {
		return runtimeapi.MountPropagation_PROPAGATION_PRIVATE, nil
	}
	switch *p {
	case corev1.MountPropagationNone:
		return runtimeapi.MountPropagation_PROPAGATION_PRIVATE, nil
	case corev1.MountPropagationHostToContainer:
		return runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER, nil
	case corev1.MountPropagationBidirectional:
		if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
			return 0, ErrPropagation
		}
		return runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL, nil
	}
	return 0, fmt.Errorf("%w: mountPropagation %q", ErrUnsupported, *p)
}

// bindSubPath resolves subPath beneath v's root and bind mounts it onto its
// volume-subpaths target, returning the target.
func (pv *PodVolumes) bindSubPath(v *volume, container string, index int, subPath string) (string, error) {
	fail := func(p string, err error) (string, error) {
		return "", volumeErr("mount subPath "+strconv.Quote(subPath)+" of", v.name, p, err)
	}
	if err := ValidateSubPath(subPath); err != nil {
		return fail(v.path, err)
	}
	if !validComponent(container) {
		return fail(v.path, fmt.Errorf("%w: container name %q", ErrUnsafePath, container))
	}
	rootFd, err := pv.openVolumeRoot(v)
	if err != nil {
		return fail(v.path, err)
	}
	defer unix.Close(rootFd)

	src, err := openBeneath(rootFd, subPath, unix.O_PATH)
	if errors.Is(err, unix.ENOENT) && v.createSubPaths {
		src, err = mkdirAllBeneath(rootFd, subPath, payloadDirMode)
	}
	if err != nil {
		return fail(filepath.Join(v.path, subPath), err)
	}
	defer unix.Close(src)
	var srcSt unix.Stat_t
	if err := unix.Fstat(src, &srcSt); err != nil {
		return fail(filepath.Join(v.path, subPath), err)
	}

	target, mounted, err := pv.m.bindChecked(checkedBind{
		src:       src,
		srcSt:     &srcSt,
		parentRel: filepath.Join(string(pv.uid), volumeSubpathsDir, v.name, container),
		name:      strconv.Itoa(index),
	})
	if err != nil {
		return fail(target, err)
	}
	if mounted {
		pv.m.log.Info("mounted subPath", "pod_uid", string(pv.uid), "volume", v.name, "sub_path", subPath, "path", target)
	}
	return target, nil
}

// openVolumeRoot opens v's root directory beneath RootDir/pods: its
// volume directory, or for a hostPath the bind mount of the checked
// hostPath (setupHostPath), so that a subPath is resolved in the object
// that was checked, not in what the hostPath's path names now. The
// directory is v.path, not one named after the pod's volume: a claim's
// volume is named after its PersistentVolume (volumes/<plugin>/<pv name>),
// as the kubelet names it.
func (pv *PodVolumes) openVolumeRoot(v *volume) (int, error) {
	rel, err := filepath.Rel(pv.m.podsDir, v.path)
	if err != nil || !filepath.IsLocal(rel) {
		return -1, fmt.Errorf("volume %q: %w: its directory %s is not beneath %s", v.name, ErrUnsafePath, v.path, pv.m.podsDir)
	}
	podsFd, err := pv.m.openPodsDir()
	if err != nil {
		return -1, err
	}
	defer unix.Close(podsFd)
	return openBeneath(podsFd, rel, unix.O_PATH|unix.O_DIRECTORY)
}
