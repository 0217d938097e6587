// PersistentVolumes of type local and hostPath, and the raw block volumes
// (volumeMode Block) of local ones.

package mounts

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	mountutils "k8s.io/mount-utils"
	utilexec "k8s.io/utils/exec"
)

// volumeDevicesDirName holds the raw block volumes of a pod, as the
// kubelet's pods/<uid>/volumeDevices/<plugin>/<name>.
const volumeDevicesDirName = "volumeDevices"

// defaultFSType is what a local block device is formatted with when its
// PersistentVolume names no spec.local.fsType: the kubelet's (and
// SafeFormatAndMount's) default.
const defaultFSType = "ext4"

// ErrLocalPath is wrapped when the path of a local PersistentVolume is
// missing or is neither a block device nor a directory (or not a block
// device, for volumeMode Block).
var ErrLocalPath = errors.New("local volume path unusable")

// localMounter mounts PersistentVolumes of type local as the kubelet's
// local volume plugin does: a block device is formatted if it has no file
// system (SafeFormatAndMount, which probes with blkid first and never
// formats a device that has one) and mounted; a directory is bind
// mounted. mount-utils runs mount(8), mkfs and fsck, without systemd-run
// (nodeguard makes no cgroups outside its own).
type localMounter struct {
	mounter *mountutils.SafeFormatAndMount
	log     *slog.Logger
}

func newLocalMounter(log *slog.Logger) *localMounter {
	return &localMounter{
		mounter: mountutils.NewSafeFormatAndMount(mountutils.NewWithoutSystemd(""), utilexec.New()),
		log:     log,
	}
}

func (*localMounter) Plugin() string { return PluginLocalVolume }

// MountPV mounts the local volume req.PV on req.Dir unless something is
// mounted there already. For a block device, that mount must be of the
// device: a different one is an error, never stacked on.
func (l *localMounter) MountPV(ctx context.Context, req PVMount) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	src := req.PV.Spec.Local.Path
	var st unix.Stat_t
	if err := unix.Stat(src, &st); err != nil {
		return fmt.Errorf("persistentvolume %q: spec.local.path %s: %w: %w", req.PV.Name, src, ErrLocalPath, err)
	}
	mounted, err := isMounted(req.Dir)
	if err != nil {
		return fmt.Errorf("persistentvolume %q: check mount %s: %w", req.PV.Name, req.Dir, err)
	}
	opts := slices.Clone(req.PV.Spec.MountOptions)
	if req.ReadOnly {
		opts = append(opts, "ro")
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFBLK:
		if mounted {
			// The root of a block device's file system has the
			// device's number as its st_dev.
			var got unix.Stat_t
			if err := unix.Stat(req.Dir, &got); err != nil {
				return fmt.Errorf("persistentvolume %q: %w", req.PV.Name, err)
			}
			if got.Dev != st.Rdev {
				return fmt.Errorf("persistentvolume %q: %s has device %d:%d mounted, not %s (%d:%d)", req.PV.Name, req.Dir,
					unix.Major(got.Dev), unix.Minor(got.Dev), src, unix.Major(st.Rdev), unix.Minor(st.Rdev))
			}
			return nil
		}
		fsType := req.PV.Spec.Local.FSType
		if fsType == nil || *fsType == "" {
			fsType = &[]string{defaultFSType}[0]
		}
		if err := l.mounter.FormatAndMount(src, req.Dir, *fsType, opts); err != nil {
			return fmt.Errorf("persistentvolume %q: format and mount %s (%s) on %s: %w", req.PV.Name, src, *fsType, req.Dir, err)
		}
		l.log.Info("mounted local block device", "pv", req.PV.Name, "device", src, "fs_type", *fsType, "path", req.Dir, "read_only", req.ReadOnly)
	case unix.S_IFDIR:
		if mounted {
			return nil
		}
		if err := l.mounter.Mount(src, req.Dir, "", append([]string{"bind"}, opts...)); err != nil {
			return fmt.Errorf("persistentvolume %q: bind mount %s on %s: %w", req.PV.Name, src, req.Dir, err)
		}
		l.log.Info("bind mounted local directory", "pv", req.PV.Name, "source", src, "path", req.Dir, "read_only", req.ReadOnly)
	default:
		return fmt.Errorf("persistentvolume %q: spec.local.path %s: %w: not a block device nor a directory", req.PV.Name, src, ErrLocalPath)
	}
	return nil
}

// setupClaim resolves the pod volume v's claim (Claim) and makes its
// volume ready:
//
//   - volumeMode Filesystem: the volume's mounter (pvMounter) mounts it at
//     RootDir/pods/<uid>/volumes/<plugin>/<pv name>, the kubelet's path; a
//     hostPath volume is checked and bind mounted as an inline hostPath
//     volume is (setupHostPath: the node's allowlist, its type);
//   - volumeMode Block: the local volume's block device is bind mounted on
//     RootDir/pods/<uid>/volumeDevices/kubernetes.io~local-volume/<pv name>,
//     which is handed to the runtime as the device (Devices), as the
//     kubelet's block volume mapper hands its mapped path.
//
// The pod volume is read-only when persistentVolumeClaim.readOnly says so;
// a writable local volume is given to the pod's fsGroup as an emptyDir is.
func (m *Volumes) setupClaim(ctx context.Context, podsFd int, pod *corev1.Pod, v *corev1.Volume) (*volume, error) {
	key := claimKey{m.PodDir(pod.UID), v.Name}
	if vol, ok := m.claimedVolume(key); ok {
		return vol, nil
	}
	vol, err := m.setupClaimOnce(ctx, podsFd, pod, v)
	if err != nil {
		return nil, err
	}
	m.claimedMu.Lock()
	defer m.claimedMu.Unlock()
	if m.claimed == nil {
		m.claimed = map[claimKey]*volume{}
	}
	m.claimed[key] = vol
	return vol, nil
}

// claimedVolume returns the volume set up for key earlier, if it is still
// in place: mounted.
func (m *Volumes) claimedVolume(key claimKey) (*volume, bool) {
	m.claimedMu.Lock()
	vol, ok := m.claimed[key]
	m.claimedMu.Unlock()
	if !ok {
		return nil, false
	}
	mounted, err := isMounted(vol.path)
	return vol, err == nil && mounted
}

// isMounted reports whether something is mounted at p; a missing p is
// not.
func isMounted(p string) (bool, error) {
	mounted, err := mountinfo.Mounted(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return mounted, err
}

// forgetClaims drops the claim volumes of the pod directory podDir.
func (m *Volumes) forgetClaims(podDir string) {
	m.claimedMu.Lock()
	defer m.claimedMu.Unlock()
	for k := range m.claimed {
		if k.podDir == podDir {
			delete(m.claimed, k)
		}
	}
}

func (m *Volumes) setupClaimOnce(ctx context.Context, podsFd int, pod *corev1.Pod, v *corev1.Volume) (*volume, error) {
	c := v.PersistentVolumeClaim
	pv, _, err := m.Claim(pod.Namespace, c.ClaimName)
	if err != nil {
		return nil, volumeErr("set up", v.Name, "", err)
	}
	s := &pv.Spec.PersistentVolumeSource
	if volumeMode(pv.Spec.VolumeMode) == corev1.PersistentVolumeBlock {
		return m.mapBlock(podsFd, pod, v, pv)
	}
	if h := s.HostPath; h != nil {
		vol, err := m.setupHostPath(pod, v.Name, h, c.ReadOnly)
		if err != nil {
			return nil, fmt.Errorf("persistentvolume %q: spec.hostPath: %w", pv.Name, err)
		}
		return vol, nil
	}
	mounter, err := m.pvMounter(pv)
	if err != nil {
		return nil, volumeErr("set up", v.Name, "", err)
	}
	if !validComponent(pv.Name) {
		return nil, volumeErr("set up", v.Name, "", fmt.Errorf("persistentvolume %q: %w: its name is not a single path component", pv.Name, ErrUnsafePath))
	}
	rel := filepath.Join(string(pod.UID), volumesDirName, mounter.Plugin(), pv.Name)
	dir := filepath.Join(m.podsDir, rel)
	fd, err := mkdirAllBeneath(podsFd, rel, podDirMode)
	if err != nil {
		return nil, volumeErr("set up", v.Name, dir, err)
	}
	unix.Close(fd)
	if err := mounter.MountPV(ctx, PVMount{PV: pv, Dir: dir, ReadOnly: c.ReadOnly}); err != nil {
		return nil, volumeErr("set up", v.Name, dir, err)
	}
	// The kubelet's local volume plugin gives a writable volume to the
	// pod's fsGroup (SetVolumeOwnership), as an emptyDir.
	if s.Local != nil && !c.ReadOnly {
		if err := m.ownVolume(pod, dir, false); err != nil {
			return nil, volumeErr("set up", v.Name, dir, err)
		}
	}
	return &volume{name: v.Name, plugin: mounter.Plugin(), path: dir, readOnly: c.ReadOnly, createSubPaths: true}, nil
}

// mapBlock makes the raw block volume of v: the local volume pv's block
// device, bind mounted on an empty file beneath the pod's volumeDevices
// directory (through the procfs link of the file opened beneath
// RootDir/pods). The bind mount is what keeps the device's path in the
// pod's directory for the runtime, and what Teardown finds and unmounts.
func (m *Volumes) mapBlock(podsFd int, pod *corev1.Pod, v *corev1.Volume, pv *corev1.PersistentVolume) (*volume, error) {
	l := pv.Spec.Local
	if l == nil {
		return nil, volumeErr("map", v.Name, "", fmt.Errorf("persistentvolume %q: %w: volumeMode Block needs a local volume (a block device), nodeguard maps no other source", pv.Name, ErrUnsupported))
	}
	if !validComponent(pv.Name) {
		return nil, volumeErr("map", v.Name, "", fmt.Errorf("persistentvolume %q: %w: its name is not a single path component", pv.Name, ErrUnsafePath))
	}
	var st unix.Stat_t
	if err := unix.Stat(l.Path, &st); err != nil {
		return nil, volumeErr("map", v.Name, l.Path, fmt.Errorf("persistentvolume %q: spec.local.path: %w: %w", pv.Name, ErrLocalPath, err))
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return nil, volumeErr("map", v.Name, l.Path, fmt.Errorf("persistentvolume %q: spec.local.path: %w: volumeMode Block needs a block device", pv.Name, ErrLocalPath))
	}
	parentRel := filepath.Join(string(pod.UID), volumeDevicesDirName, PluginLocalVolume)
	target := filepath.Join(m.podsDir, parentRel, pv.Name)
	vol := &volume{name: v.Name, plugin: PluginLocalVolume, path: target, readOnly: v.PersistentVolumeClaim.ReadOnly, block: true}

	mounted, err := isMounted(target)
	if err != nil {
		return nil, volumeErr("map", v.Name, target, err)
	}
	if mounted {
		var got unix.Stat_t
		if err := unix.Stat(target, &got); err != nil {
			return nil, volumeErr("map", v.Name, target, err)
		}
		if got.Mode&unix.S_IFMT != unix.S_IFBLK || got.Rdev != st.Rdev {
			return nil, volumeErr("map", v.Name, target, fmt.Errorf("persistentvolume %q: something other than %s is mounted there", pv.Name, l.Path))
		}
		return vol, nil
	}
	if err := createFileBeneath(podsFd, filepath.Join(parentRel, pv.Name)); err != nil {
		return nil, volumeErr("map", v.Name, target, err)
	}
	fd, err := openBeneath(podsFd, filepath.Join(parentRel, pv.Name), unix.O_PATH)
	if err != nil {
		return nil, volumeErr("map", v.Name, target, err)
	}
	defer unix.Close(fd)
	if err := unix.Mount(l.Path, fdPath(fd), "", unix.MS_BIND, ""); err != nil {
		return nil, volumeErr("map", v.Name, target, fmt.Errorf("bind %s: %w", l.Path, err))
	}
	m.log.Info("mapped block device", "pod_uid", string(pod.UID), "pv", pv.Name, "device", l.Path, "path", target)
	return vol, nil
}
