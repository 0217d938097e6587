package nodestats

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
)

// Where the memory controller's root is usually mounted.
const (
	// RootMemcgV1 is the root of the v1 memory hierarchy (hybrid and v1
	// hosts).
	RootMemcgV1 = "/sys/fs/cgroup/memory"
	// RootCgroupV2 is the root of the cgroup2 hierarchy on a pure v2 host.
	RootCgroupV2 = "/sys/fs/cgroup"
)

// CgroupMemory is a memory cgroup's usage as cAdvisor reads it for the
// kubelet, in bytes. The kubelet's node memory.available comes from the
// root cgroup's; its allocatableMemory.available from the pod cgroup
// root's (kubepods).
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

// ReadCgroupMemoryV1 reads a v1 memory cgroup directory, the root one
// (RootMemcgV1) for the node: memory.usage_in_bytes and memory.stat's
// total_inactive_file. It only reads.
func ReadCgroupMemoryV1(dir string) (CgroupMemory, error) {
	usage, err := readSingleUint(filepath.Join(dir, "memory.usage_in_bytes"))
	if err != nil {
		return CgroupMemory{}, err
	}
	name := filepath.Join(dir, "memory.stat")
	b, err := readKernelFile(name)
	if err != nil {
		return CgroupMemory{}, err
	}
	var inactive uint64
	if err := scanMemoryStat(name, b, statKey{"total_inactive_file", &inactive}); err != nil {
		return CgroupMemory{}, err
	}
	return CgroupMemory{Usage: usage, InactiveFile: inactive}, nil
}

// ReadCgroupMemoryV2 reads a cgroup2 directory with the memory controller,
// the root one (RootCgroupV2) for the node. A cgroup with memory.current
// gives that as Usage; the root, which has none, gives anon + file from its
// memory.stat, as runc does. InactiveFile is memory.stat's inactive_file.
// A kernel without a root memory.stat gives ErrUnsupported; runc's
// GetStats skips a missing memory.stat silently, so a kubelet there sees
// zero usage and memory.available equal to MemTotal. It only reads.
func ReadCgroupMemoryV2(dir string) (CgroupMemory, error) {
	name := filepath.Join(dir, "memory.stat")
	b, err := readKernelFile(name)
	if err != nil {
		return CgroupMemory{}, err
	}
	var c CgroupMemory
	current, err := readSingleUint(filepath.Join(dir, "memory.current"))
	switch {
	case err == nil:
		c.Usage = current
		err = scanMemoryStat(name, b, statKey{"inactive_file", &c.InactiveFile})
	case errors.Is(err, fs.ErrNotExist):
		var anon, file uint64
		err = scanMemoryStat(name, b,
			statKey{"anon", &anon}, statKey{"file", &file}, statKey{"inactive_file", &c.InactiveFile})
		if err == nil && anon > math.MaxUint64-file {
			err = &ParseError{File: name, Msg: "anon + file overflows 64 bits"}
		}
		c.Usage = anon + file
	}
	if err != nil {
		return CgroupMemory{}, err
	}
	return c, nil
}

// statKey is a memory.stat key to find and where to store its value.
type statKey struct {
	name string
	dst  *uint64
}

// scanMemoryStat checks that every line of a memory.stat file b reads
// "key value" and stores the value of each wanted key. A wanted key that is
// missing is an error: every kernel writes the ones asked for here.
func scanMemoryStat(name string, b []byte, want ...statKey) error {
	var found uint32
	ls := lines{rest: b}
	for {
		line, ok := ls.next()
		if !ok {
			break
		}
		key, v, ok := splitFlat(line)
		if !ok {
			return &ParseError{File: name, Line: ls.n, Msg: "not a \"key value\" line"}
		}
		for i, w := range want {
			if string(key) == w.name {
				*w.dst = v
				found |= 1 << i
			}
		}
	}
	for i, w := range want {
		if found&(1<<i) == 0 {
			return &ParseError{File: name, Msg: "missing key " + w.name}
		}
	}
	return nil
}

// readSingleUint reads a cgroup file holding one unsigned decimal.
func readSingleUint(name string) (uint64, error) {
	b, err := readKernelFile(name)
	if err != nil {
		return 0, err
	}
	v, ok := parseUint(bytes.TrimSuffix(b, []byte("\n")))
	if !ok {
		return 0, &ParseError{File: name, Line: 1, Msg: fmt.Sprintf("not an unsigned decimal number: %q", bytes.TrimSpace(b))}
	}
	return v, nil
}
