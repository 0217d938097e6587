package cgstat

import (
	"bytes"
	"errors"
	"fmt"
	"math"

	"golang.org/x/sys/unix"
)

// CgroupMemory is a memory cgroup's usage as cAdvisor reads it for the
// kubelet, in bytes: the two figures the kubelet's memory signals take from
// a cgroup. The node's memory.available comes from the root cgroup's; its
// allocatableMemory.available from the pod cgroup root's (kubepods).
type CgroupMemory struct {
	// Usage is cAdvisor's memory usage (runc/opencontainers cgroups
	// GetStats, MemoryStats.Usage.Usage):
	//   - v1, any cgroup, root included: memory.usage_in_bytes (for the
	//     root the kernel computes it as file + anon pages, plus swap);
	//   - v2, non-root: memory.current;
	//   - v2 root, which has no memory.current: anon + file from the
	//     root's memory.stat (opencontainers/cgroups fs2/memory.go
	//     rootStatsFromMeminfo; runc >= 1.1.9, so kubelet >= 1.29). runc
	//     up to 1.1.8 used MemTotal - MemFree from /proc/meminfo instead,
	//     which reads higher: kubernetes issue 118916.
	Usage uint64
	// InactiveFile is the cgroup's inactive file LRU: memory.stat's
	// total_inactive_file on v1 (hierarchical), inactive_file on v2.
	InactiveFile uint64
}

// WorkingSet returns cAdvisor's working set: Usage - InactiveFile, or 0
// when InactiveFile is larger (cAdvisor container/libcontainer/handler.go
// setMemoryStats). The kubelet takes this as the memory that cannot be
// reclaimed cheaply; note that active file pages count as in use.
func (c CgroupMemory) WorkingSet() uint64 {
	if c.Usage < c.InactiveFile {
		return 0
	}
	return c.Usage - c.InactiveFile
}

// CgroupMemory returns the figures of m that the kubelet's signals take:
// the same Usage and InactiveFile.
func (m *Memory) CgroupMemory() CgroupMemory {
	return CgroupMemory{Usage: m.Usage, InactiveFile: m.InactiveFile}
}

// ReadCgroupMemoryV1 reads a v1 memory cgroup directory, the hierarchy's
// root (cgroups.Layout.Memory.Mount) for the node: memory.usage_in_bytes,
// and memory.stat's total_inactive_file through the memory.stat parser of
// Reader. It opens each file once, beneath one descriptor of dir, and only
// reads. Errors are Reader.Read's: ErrGone, ErrUnsupported (a file missing
// from an existing directory), ErrMalformed.
func ReadCgroupMemoryV1(dir string) (CgroupMemory, error) {
	d, err := openOnce(dir)
	if err != nil {
		return CgroupMemory{}, err
	}
	defer d.close()
	b, name, err := d.read("memory.usage_in_bytes")
	if err != nil {
		return CgroupMemory{}, err
	}
	usage, err := parseSingle(b, name, false)
	if err != nil {
		return CgroupMemory{}, err
	}
	if b, name, err = d.read("memory.stat"); err != nil {
		return CgroupMemory{}, err
	}
	return fromStat(b, name, true, usage, true)
}

// ReadCgroupMemoryV2 reads a cgroup2 directory with the memory controller,
// the hierarchy's root (cgroups.Layout.Memory.Mount on a pure v2 host) for
// the node. A cgroup with memory.current gives that as Usage; the root,
// which has none, gives anon + file from its memory.stat, as runc does.
// InactiveFile is memory.stat's inactive_file. A kernel without a root
// memory.stat gives ErrUnsupported; runc's GetStats skips a missing
// memory.stat silently, so a kubelet there sees zero usage and
// memory.available equal to MemTotal. It opens each file once, beneath
// one descriptor of dir, and only reads. Errors are as for
// ReadCgroupMemoryV1.
func ReadCgroupMemoryV2(dir string) (CgroupMemory, error) {
	d, err := openOnce(dir)
	if err != nil {
		return CgroupMemory{}, err
	}
	defer d.close()
	b, name, err := d.read("memory.current")
	var current uint64
	switch {
	case err == nil:
		if current, err = parseSingle(b, name, false); err != nil {
			return CgroupMemory{}, err
		}
	case errors.Is(err, ErrUnsupported):
		// The root cgroup: no memory.current.
	default:
		return CgroupMemory{}, err
	}
	hasCurrent := err == nil
	if b, name, err = d.read("memory.stat"); err != nil {
		return CgroupMemory{}, err
	}
	return fromStat(b, name, false, current, hasCurrent)
}

// fromStat makes a CgroupMemory from the memory.stat content b of file
// name (v1 or cgroup2 keys), parsed by the Reader's parser: InactiveFile
// from it, and Usage from usage, or, where the cgroup has no usage file
// (hasUsage false: the cgroup2 root), anon + file of b. It requires the
// keys it uses, and only those: (total_)inactive_file, and anon and file
// for the root.
func fromStat(b []byte, name string, v1 bool, usage uint64, hasUsage bool) (CgroupMemory, error) {
	need := seenInactiveFile
	if !hasUsage {
		need |= seenAnon | seenFile
	}
	var m Memory
	parse := memoryStatV2
	if v1 {
		parse = memoryStatV1
	}
	if err := parse(b, name, &m, need); err != nil {
		return CgroupMemory{}, err
	}
	if !hasUsage {
		if m.Anon > math.MaxUint64-m.File {
			return CgroupMemory{}, malformed(name, bytes.Count(b, []byte{'\n'})+1, "anon + file overflows 64 bits")
		}
		usage = m.Anon + m.File
	}
	return CgroupMemory{Usage: usage, InactiveFile: m.InactiveFile}, nil
}

// onceDir reads a few files of one cgroup directory once each, opened
// beneath one descriptor of it, as Reader opens its files, so that they
// come from one cgroup even if the path is removed and made again.
type onceDir struct {
	dir string
	dfd int
	buf []byte
}

// openOnce opens dir. A directory that does not exist is ErrGone.
func openOnce(dir string) (*onceDir, error) {
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ENOENT || err == unix.ENODEV {
			return nil, fmt.Errorf("open %s: %w: %w", dir, ErrGone, err)
		}
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	return &onceDir{dir: dir, dfd: dfd}, nil
}

// read returns the whole content of the file name and its path. The
// content is valid until the next read. A file missing from a directory
// that still exists is ErrUnsupported; from a removed one, ErrGone.
func (d *onceDir) read(name string) ([]byte, string, error) {
	p := d.dir + "/" + name
	fd, err := openBeneath(d.dfd, name)
	if err != nil {
		switch {
		case (err == unix.ENOENT || err == unix.ENODEV) && !sameDirAt(d.dfd, d.dir):
			return nil, p, fmt.Errorf("open %s: %w: %w", p, ErrGone, err)
		case err == unix.ENOENT:
			return nil, p, fmt.Errorf("open %s: %w: %w", p, ErrUnsupported, err)
		}
		return nil, p, fmt.Errorf("open %s: %w", p, err)
	}
	defer unix.Close(fd)
	b, err := preadWhole(fd, &d.buf)
	if err != nil {
		return nil, p, preadError(p, err)
	}
	return b, p, nil
}

func (d *onceDir) close() { unix.Close(d.dfd) }
