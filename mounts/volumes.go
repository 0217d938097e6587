package mounts

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// The kubelet's volume plugin directory names ("kubernetes.io/empty-dir"
// with the '/' escaped as '~'), so that tools that know the kubelet's layout
// find the volumes.
const (
	PluginEmptyDir    = "kubernetes.io~empty-dir"
	PluginHostPath    = "kubernetes.io~host-path"
	PluginConfigMap   = "kubernetes.io~configmap"
	PluginSecret      = "kubernetes.io~secret"
	PluginProjected   = "kubernetes.io~projected"
	PluginDownwardAPI = "kubernetes.io~downward-api"
	// PluginNFS is in nfs.go.
)

// Directory names beneath a pod's directory, as the kubelet names them.
const (
	podsDirName       = "pods"
	volumesDirName    = "volumes"
	volumeSubpathsDir = "volume-subpaths"
)

// Modes of the directories this package makes. Pod directories are the
// agent's own (0750, as the kubelet's); emptyDir roots are 0777 because any
// container user must be able to write them (the kubelet's perm); directories
// inside payloads and created hostPaths are 0755 (the kubelet's).
const (
	podDirMode      = 0o750
	emptyDirMode    = 0o777
	payloadDirMode  = 0o755
	hostPathDirMode = 0o755
	hostPathFileMod = 0o644
)

// Config configures a Volumes.
type Config struct {
	// RootDir holds the per-pod directories, at RootDir/pods/<uid>. It is
	// made if missing. Required.
	RootDir string
	// HostPathAllow lists the absolute path prefixes that hostPath volumes
	// may use (a prefix matches whole components: "/srv" allows "/srv/a",
	// not "/srvx"). Empty refuses every hostPath volume.
	HostPathAllow []string
	// SourceDir is where configMaps and secrets come from:
	// SourceDir/configmaps/<namespace>/<name>/<key> and
	// SourceDir/secrets/<namespace>/<name>/<key>, one file per key. Empty
	// means none exist (every non-optional configMap or secret volume
	// fails).
	SourceDir string
	// Objects, when set, is where configMaps and secrets come from
	// instead of SourceDir, and what issues service account tokens for
	// projected serviceAccountToken sources (node mode: the API server).
	Objects Objects
	// NodeMemory caps memory-backed volumes (bytes): the tmpfs size when
	// neither the volume's sizeLimit nor the pod's memory limit is known.
	// Zero means the node's total memory.
	NodeMemory int64
	// Allocatable is the node's allocatable: the value of a downwardAPI
	// resourceFieldRef to a limit its container does not set, as the
	// kubelet's. Unset memory is NodeMemory (or the node's total), unset
	// cpu the machine's CPUs.
	Allocatable corev1.ResourceList
	// Logger receives one line per mount, unmount and removal; nil
	// discards.
	Logger *slog.Logger
	// Now names payload generations; time.Now when nil.
	Now func() time.Time
	// NodeNetNS is the network namespace NFS volumes are mounted from
	// (their client sockets are made there): the node's, where the pod
	// network is (lifecycle's Network.NodeNetNS). Empty is the agent's
	// own.
	NodeNetNS string
	// NFSMounter mounts NFS volumes; nil is k8s.io/mount-utils' mounter,
	// which runs mount(8) (mount.nfs from nfs-common).
	NFSMounter NFSMounter
	// NFSMountTimeout and NFSUnmountTimeout bound the NFS client calls;
	// zero is DefaultNFSMountTimeout and DefaultNFSUnmountTimeout.
	NFSMountTimeout, NFSUnmountTimeout time.Duration
}

// Volumes prepares, measures and removes pod volumes beneath one root. Its
// methods may be called from several goroutines, but not concurrently for
// the same pod: the caller serialises the work on one pod (the pod worker).
type Volumes struct {
	root       string // RootDir, absolute, symlinks resolved
	podsDir    string // root/pods
	allow      []string
	sourceDir  string
	objects    Objects
	nodeMemory int64
	alloc      corev1.ResourceList
	log        *slog.Logger
	now        func() time.Time
	nfs        *nfsClient
	local      *localMounter

	// owned holds the volume directories whose fsGroup ownership was set
	// since this Volumes started (ownVolume), until their pod's Teardown.
	ownedMu sync.Mutex
	owned   map[string]bool

	// claimed holds the claim volumes set up since this Volumes started,
	// by pod directory and volume name, until their pod's Teardown: a
	// volume in use keeps its binding, whatever becomes of the claim's
	// and the PV's files meanwhile (the control plane's PVC protection
	// keeps an in-use claim from going away), and a sync reads no
	// manifests for it.
	claimedMu sync.Mutex
	claimed   map[claimKey]*volume
}

type claimKey struct{ podDir, volume string }

// New checks cfg, makes RootDir/pods if it is missing and returns a
// Volumes.
func New(cfg Config) (*Volumes, error) {
	if cfg.RootDir == "" {
		return nil, errors.New("new volume manager: RootDir is required")
	}
	if !filepath.IsAbs(cfg.RootDir) {
		return nil, fmt.Errorf("new volume manager: RootDir %q must be absolute", cfg.RootDir)
	}
	if err := os.MkdirAll(filepath.Join(cfg.RootDir, podsDirName), podDirMode); err != nil {
		return nil, fmt.Errorf("new volume manager: %w", err)
	}
	// Mount points in /proc/self/mountinfo have their symlinks resolved:
	// so must the prefix that finds a pod's mounts.
	root, err := filepath.EvalSymlinks(cfg.RootDir)
	if err != nil {
		return nil, fmt.Errorf("new volume manager: resolve RootDir: %w", err)
	}
	var allow []string
	for _, p := range cfg.HostPathAllow {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("new volume manager: HostPathAllow entry %q must be absolute", p)
		}
		allow = append(allow, filepath.Clean(p))
	}
	// Longest first, so that a hostPath resolves beneath the most specific
	// prefix that allows it.
	slices.SortStableFunc(allow, func(a, b string) int { return len(b) - len(a) })
	if cfg.SourceDir != "" && !filepath.IsAbs(cfg.SourceDir) {
		return nil, fmt.Errorf("new volume manager: SourceDir %q must be absolute", cfg.SourceDir)
	}
	mem := cfg.NodeMemory
	if mem < 0 {
		return nil, fmt.Errorf("new volume manager: NodeMemory %d is negative", mem)
	}
	if mem == 0 {
		var si unix.Sysinfo_t
		if err := unix.Sysinfo(&si); err != nil {
			return nil, fmt.Errorf("new volume manager: read node memory: %w", err)
		}
		mem = int64(si.Totalram) * int64(si.Unit)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	nfs, err := newNFSClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("new volume manager: %w", err)
	}
	return &Volumes{
		nfs:        nfs,
		root:       root,
		podsDir:    filepath.Join(root, podsDirName),
		allow:      allow,
		sourceDir:  cfg.SourceDir,
		objects:    cfg.Objects,
		nodeMemory: mem,
		alloc:      allocatable(cfg.Allocatable, mem),
		log:        log,
		now:        now,
		local:      newLocalMounter(log),
	}, nil
}

// PodDir is the directory of the pod with uid: RootDir/pods/<uid>.
func (m *Volumes) PodDir(uid types.UID) string {
	return filepath.Join(m.podsDir, string(uid))
}

// VolumeDir is the host directory of a volume made by Setup:
// RootDir/pods/<uid>/volumes/<plugin>/<name>. hostPath volumes have none.
func (m *Volumes) VolumeDir(uid types.UID, plugin, name string) string {
	return filepath.Join(m.podsDir, string(uid), volumesDirName, plugin, name)
}

// PodDirs lists the uids that have a directory under RootDir/pods, sorted.
func (m *Volumes) PodDirs() ([]types.UID, error) {
	entries, err := os.ReadDir(m.podsDir)
	if err != nil {
		return nil, fmt.Errorf("list pod directories: %w", err)
	}
	var uids []types.UID
	for _, e := range entries {
		if validComponent(e.Name()) && e.Type()&fs.ModeSymlink == 0 {
			uids = append(uids, types.UID(e.Name()))
		}
	}
	return uids, nil
}

func checkUID(uid types.UID) error {
	if !validComponent(string(uid)) {
		return fmt.Errorf("pod uid %q: %w: not a single path component", uid, ErrUnsafePath)
	}
	return nil
}

// openPodsDir opens RootDir/pods as an O_PATH directory descriptor.
func (m *Volumes) openPodsDir() (int, error) {
	return openDir(m.podsDir)
}

// hostPathRoot returns the directory that p must be resolved beneath and p
// relative to it, or ok false when no HostPathAllow prefix contains p. The
// directory is the matching prefix, or its parent when p is the prefix
// itself (which may be a file, such as a socket): then only that name is
// resolved beneath the parent, and a symlink there is followed only if it
// stays in the parent.
func (m *Volumes) hostPathRoot(p string) (root, rel string, ok bool) {
	p = filepath.Clean(p)
	for _, a := range m.allow {
		if p == a {
			if a == "/" {
				return "/", ".", true
			}
			return filepath.Dir(a), filepath.Base(a), true
		}
		prefix := a
		if !strings.HasSuffix(prefix, "/") {
			prefix += "/"
		}
		if strings.HasPrefix(p, prefix) {
			return a, strings.TrimPrefix(p, prefix), true
		}
	}
	return "", "", false
}

// allocatable is cfg's Allocatable with memory and cpu filled in.
func allocatable(cfg corev1.ResourceList, mem int64) corev1.ResourceList {
	a := cfg.DeepCopy()
	if a == nil {
		a = corev1.ResourceList{}
	}
	if _, ok := a[corev1.ResourceMemory]; !ok {
		a[corev1.ResourceMemory] = *resource.NewQuantity(mem, resource.BinarySI)
	}
	if _, ok := a[corev1.ResourceCPU]; !ok {
		a[corev1.ResourceCPU] = *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI)
	}
	return a
}

func (m *Volumes) allocatable() corev1.ResourceList { return m.alloc }
