package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// AgentLeaf is the child of its own cgroup that nodeguard moves itself into
// on cgroup v2 before it enables controllers in its own cgroup (see
// MoveSelfIntoLeaf).
const AgentLeaf = "agent"

// MoveSelfIntoLeaf makes room, on the cgroup2 hierarchy h, for children of
// this process's own cgroup that have controllers: the kernel refuses
// cgroup.subtree_control of a non-root cgroup that holds processes (the
// no-internal-process rule), and under systemd with Delegate=yes the
// service's own process sits in exactly the cgroup it was delegated. This
// process moves into <own>/<leaf> (made if missing), as systemd's
// documentation on delegation prescribes; h.Own keeps naming the delegated
// cgroup, so relative paths still resolve beneath it.
//
// It does nothing, and returns false, when h is not cgroup2, when the own
// cgroup is the root (exempt from the rule), or when it holds no process.
// It fails, moving nothing, when the own cgroup holds processes other
// than this one: they are not ours to move, and the caller must not
// enable controllers there.
func MoveSelfIntoLeaf(h *Hierarchy, leaf string) (bool, error) {
	if !h.V2() || h.Own == "/" {
		return false, nil
	}
	own := h.OwnDir()
	if own == "" {
		return false, fmt.Errorf("move into %s: %w: own cgroup %s is not visible under %s", leaf, ErrUnsupported, h.Own, h.Mount)
	}
	pids, err := Procs(own)
	if err != nil {
		return false, err
	}
	self := os.Getpid()
	var others []int
	for _, p := range pids {
		if p != self {
			others = append(others, p)
		}
	}
	if len(others) > 0 {
		return false, fmt.Errorf("move nodeguard into %s/%s: its cgroup also holds pids %v, so no controller can be enabled below it (no-internal-process rule); give nodeguard a cgroup of its own (its systemd unit with Delegate=yes) or an absolute cgroupRoot", own, leaf, others)
	}
	if len(pids) == 0 {
		return false, nil
	}
	dst := filepath.Join(own, leaf)
	if err := os.Mkdir(dst, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return false, fmt.Errorf("move nodeguard into %s: %w", dst, err)
	}
	if err := WriteFile(dst, FileProcs, strconv.Itoa(self)); err != nil {
		return false, fmt.Errorf("move nodeguard into %s: %w", dst, err)
	}
	return true, nil
}
