// PathResolver turns cgroup ids back into paths.
//
// Events carry cgroup ids (kernfs node ids, unique within one hierarchy);
// people and metrics want paths. A PathResolver learns paths from the walks and
// mkdir events it is shown and, for ids it has never seen, asks the kernel:
// kernfs supports file handles whose payload is the node id, so
// open_by_handle_at on the hierarchy's mount yields the directory, and
// /proc/self/fd names it. No directory tree is ever searched.
//
// Invariants: the cache is bounded (ids of removed cgroups are forgotten);
// a failed lookup is reported as an error, never as an empty path.

package cgroups

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// fileidKernfs is FILEID_KERNFS (include/linux/exportfs.h): a kernfs handle
// whose 8-byte payload is the node id.
const fileidKernfs = 0xfe

// maxCachedPaths bounds the cache; dense nodes have a few thousand cgroups.
const maxCachedPaths = 16384

type pathKey struct {
	hier uint32
	id   uint64
}

// PathResolver maps (hierarchy id, cgroup id) to a filesystem path.
type PathResolver struct {
	mounts map[uint32]string // hierarchy id -> mount point

	mu    sync.Mutex
	cache map[pathKey]string
}

// NewPathResolver returns a PathResolver for hierarchies mounted at the given points
// (hierarchy id 0 is cgroup2).
func NewPathResolver(mounts map[uint32]string) *PathResolver {
	return &PathResolver{mounts: mounts, cache: map[pathKey]string{}}
}

// Learn records a path seen elsewhere (a walk, a mkdir event).
func (r *PathResolver) Learn(hier uint32, id uint64, path string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.cache) >= maxCachedPaths {
		clear(r.cache)
	}
	r.cache[pathKey{hier, id}] = path
}

// Forget drops a removed cgroup.
func (r *PathResolver) Forget(hier uint32, id uint64) {
	r.mu.Lock()
	delete(r.cache, pathKey{hier, id})
	r.mu.Unlock()
}

// Path returns the filesystem path of the cgroup, asking the kernel when
// the id has not been seen.
func (r *PathResolver) Path(hier uint32, id uint64) (string, error) {
	r.mu.Lock()
	p, ok := r.cache[pathKey{hier, id}]
	r.mu.Unlock()
	if ok {
		return p, nil
	}
	mnt, ok := r.mounts[hier]
	if !ok {
		return "", fmt.Errorf("resolve cgroup %d: hierarchy %d not mounted", id, hier)
	}
	p, err := PathByHandle(mnt, id)
	if err != nil {
		return "", err
	}
	r.Learn(hier, id, p)
	return p, nil
}

// PathByHandle opens the cgroup with the given id beneath the hierarchy mounted
// at mnt and returns its path. It needs CAP_DAC_READ_SEARCH.
func PathByHandle(mnt string, id uint64) (string, error) {
	mfd, err := unix.Open(mnt, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("resolve cgroup %d: open %s: %w", id, mnt, err)
	}
	defer unix.Close(mfd)
	payload := make([]byte, 8)
	binary.LittleEndian.PutUint64(payload, id)
	fd, err := unix.OpenByHandleAt(mfd, unix.NewFileHandle(fileidKernfs, payload), unix.O_PATH|unix.O_CLOEXEC)
	if err != nil {
		return "", fmt.Errorf("resolve cgroup %d beneath %s: %w", id, mnt, err)
	}
	defer unix.Close(fd)
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "", fmt.Errorf("resolve cgroup %d: %w", id, err)
	}
	return p, nil
}
