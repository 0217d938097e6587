package lifecycle

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/mounts"
)

// PodStorage is one pod's ephemeral storage: emptyDir volumes, each
// container's writable layer and its logs. These are the kubelet's
// ephemeral-storage signals (summary API: volume, rootfs and logs stats).
type PodStorage struct {
	Namespace, Name string
	UID             types.UID
	Volumes         []mounts.VolumeUsage
	Containers      []ContainerStorage
}

// ContainerStorage is one container's share of its pod's ephemeral storage.
type ContainerStorage struct {
	Name                      string
	RootfsBytes, RootfsInodes uint64
	LogsBytes, LogsInodes     uint64
}

// EphemeralBytes is what counts against the pod's ephemeral-storage limit
// as the kubelet counts it: disk-backed emptyDirs, writable layers and
// logs (memory-backed emptyDirs count as memory).
func (s *PodStorage) EphemeralBytes() uint64 {
	var n uint64
	for _, v := range s.Volumes {
		if v.Medium != "Memory" {
			n += v.Bytes
		}
	}
	for _, c := range s.Containers {
		n += c.RootfsBytes + c.LogsBytes
	}
	return n
}

// EphemeralInodes is the number of inodes the pod uses on the node's
// filesystems, counted over the same parts as EphemeralBytes, as the
// kubelet's podDiskUsage counts them for the inodesFree signals' ranking
// (its containerUsage and podLocalVolumeUsage: the writable layers' and
// the logs' inodes_used, and the local volumes').
func (s *PodStorage) EphemeralInodes() uint64 {
	var n uint64
	for _, v := range s.Volumes {
		if v.Medium != "Memory" {
			n += v.Inodes
		}
	}
	for _, c := range s.Containers {
		n += c.RootfsInodes + c.LogsInodes
	}
	return n
}

// storageUse is one pod's figures at the last Storage sample, for the
// eviction policy's ranking.
type storageUse struct{ bytes, inodes int64 }

// Storage samples every pod's ephemeral storage. It walks volume and log
// directories, so it belongs on a slow cadence (the kubelet's is 10 s to
// a minute); a pod whose figures cannot be read is reported without them.
func (m *Manager) Storage(ctx context.Context) ([]PodStorage, error) {
	cctx, cancel := call(ctx)
	stats, err := m.cfg.Runtime.ListContainerStats(cctx)
	cancel()
	if err != nil {
		return nil, err
	}
	type rootfs struct{ bytes, inodes uint64 }
	byPod := map[types.UID]map[string]rootfs{}
	for _, s := range stats {
		uid := types.UID(s.GetAttributes().GetLabels()[cri.PodUIDLabel])
		name := s.GetAttributes().GetMetadata().GetName()
		if byPod[uid] == nil {
			byPod[uid] = map[string]rootfs{}
		}
		w := s.GetWritableLayer()
		// Several attempts of one container: the newest is listed last
		// by containerd; add them up, as they all take space.
		r := byPod[uid][name]
		r.bytes += w.GetUsedBytes().GetValue()
		r.inodes += w.GetInodesUsed().GetValue()
		byPod[uid][name] = r
	}
	var out []PodStorage
	for _, p := range m.List() {
		ps := PodStorage{Namespace: p.Namespace, Name: p.Name, UID: p.UID}
		if m.cfg.Volumes != nil && len(p.Spec.Volumes) > 0 {
			if vs, err := m.cfg.Volumes.Usage(p.UID, p); err == nil {
				ps.Volumes = vs
			} else {
				m.log.Debug("volume usage", "pod", key(p), "err", err)
			}
		}
		for _, c := range slices.Concat(p.Spec.InitContainers, p.Spec.Containers) {
			r := byPod[p.UID][c.Name]
			logBytes, logInodes := dirUsage(filepath.Join(m.logDir(p), c.Name))
			ps.Containers = append(ps.Containers, ContainerStorage{
				Name: c.Name, RootfsBytes: r.bytes, RootfsInodes: r.inodes,
				LogsBytes: logBytes, LogsInodes: logInodes,
			})
		}
		out = append(out, ps)
	}
	eph := make(map[types.UID]storageUse, len(out))
	for i := range out {
		eph[out[i].UID] = storageUse{bytes: int64(out[i].EphemeralBytes()), inodes: int64(out[i].EphemeralInodes())}
	}
	m.ephemeral.Store(&eph)
	return out, nil
}

// ephemeralUsage is the pod's ephemeral storage at the last Storage
// sample (0 before one): the eviction policy's disk signals rank by it.
func (m *Manager) ephemeralUsage(uid types.UID) int64 {
	if p := m.ephemeral.Load(); p != nil {
		return (*p)[uid].bytes
	}
	return 0
}

// inodeUsage is the pod's inode count at the last Storage sample, and
// whether the sample has the pod (a pod started since has no figure,
// which the policy ranks as the kubelet ranks a pod without stats).
func (m *Manager) inodeUsage(uid types.UID) (int64, bool) {
	if p := m.ephemeral.Load(); p != nil {
		u, ok := (*p)[uid]
		return u.inodes, ok
	}
	return 0, false
}

// dirUsage is the space the regular files under dir take, and the number
// of inodes there, dir's own included, as du counts them (0, 0 when it
// does not exist).
func dirUsage(dir string) (bytes, inodes uint64) {
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		inodes++
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				bytes += uint64(fi.Size())
			}
		}
		return nil
	})
	return bytes, inodes
}
