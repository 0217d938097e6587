package kubepods

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups"
)

// delegated are the controllers the pod hierarchy uses on cgroup2: each
// level above a pod enables those of them its parent gives it.
var delegated = []string{"memory", "cpu", "pids", "io"}

// cgroupfsPlacer is the cgroupfs driver: Cgroups makes the directories
// itself, in every mounted hierarchy, and writes the controller files, as
// the kubelet's cgroupfs cgroup manager (through runc's fs managers) does.
type cgroupfsPlacer struct{ m *Cgroups }

func (p *cgroupfsPlacer) close() error { return nil }

func (p *cgroupfsPlacer) ensure(_ context.Context, name string, _ level, rc ResourceConfig) error {
	dirs, err := p.m.layout.Resolve(name)
	if err != nil {
		return err
	}
	for _, d := range dirs {
		if err := p.mkdirDelegating(d); err != nil {
			return err
		}
	}
	return writeResources(dirs, rc)
}

func (p *cgroupfsPlacer) remove(_ context.Context, name string, deadline time.Time) error {
	return p.m.removeDirsBy(name, deadline)
}

// base is the directory of d's hierarchy that the root hangs from: the
// mount for an absolute root, this process's own cgroup for a relative one
// (also where spell made the relative name absolute).
func (p *cgroupfsPlacer) base(d cgroups.Dir) string {
	if path.IsAbs(p.m.root) {
		return d.Hierarchy.Mount
	}
	return d.Hierarchy.OwnDir()
}

// mkdirDelegating makes d and every missing directory above it down from
// the hierarchy's base; on cgroup2 every level above d delegates its
// controllers, or d would have no memory.max to write. The base itself
// delegates too: with a relative root that is this process's own cgroup,
// which on cgroup2 must first hold no process (MoveSelfIntoLeaf; the
// caller does that once at start, before anything else runs in it).
func (p *cgroupfsPlacer) mkdirDelegating(d cgroups.Dir) error {
	base := p.base(d)
	if base == "" || (d.Path != base && !strings.HasPrefix(d.Path, base+"/")) {
		return fmt.Errorf("%s is not beneath %s", d.Path, base)
	}
	levels := []string{base}
	cur := base
	if rest := strings.Trim(strings.TrimPrefix(d.Path, base), "/"); rest != "" {
		for _, c := range strings.Split(rest, "/") {
			cur = filepath.Join(cur, c)
			levels = append(levels, cur)
		}
	}
	for i, l := range levels {
		if i > 0 {
			if err := os.Mkdir(l, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
		}
		if d.Hierarchy.V2() && i < len(levels)-1 {
			if err := cgroups.EnableControllers(l, delegated...); err != nil {
				if l == base && errors.Is(err, unix.EBUSY) {
					return fmt.Errorf("%w: %s holds processes, so no controller can be enabled below it (the no-internal-process rule of cgroup v2): use an absolute cgroupRoot, or run nodeguard in a cgroup of its own", err, l)
				}
				return err
			}
		}
	}
	return nil
}

// writeResources writes rc into the hierarchy that holds each controller.
func writeResources(dirs []cgroups.Dir, rc ResourceConfig) error {
	for _, d := range dirs {
		h := d.Hierarchy
		v2 := h.V2()
		has := func(c string) bool {
			if !v2 {
				return h.Has(c)
			}
			_, err := os.Stat(filepath.Join(d.Path, c+".max"))
			if c == "cpu" {
				_, err = os.Stat(filepath.Join(d.Path, "cpu.weight"))
			}
			return err == nil
		}
		w := func(name, v string) error { return cgroups.WriteFile(d.Path, name, v) }
		if rc.Memory != nil && has("memory") {
			if err := w(h.MemoryLimitFile(), strconv.FormatInt(*rc.Memory, 10)); err != nil {
				return err
			}
		}
		if has("cpu") {
			if v2 {
				if rc.CPUWeight != nil {
					if err := w("cpu.weight", strconv.FormatUint(*rc.CPUWeight, 10)); err != nil {
						return err
					}
				}
				if rc.CPUQuota != nil && rc.CPUPeriod != nil {
					q := "max"
					if *rc.CPUQuota >= 0 {
						q = strconv.FormatInt(*rc.CPUQuota, 10)
					}
					if err := w("cpu.max", q+" "+strconv.FormatUint(*rc.CPUPeriod, 10)); err != nil {
						return err
					}
				}
			} else {
				if rc.CPUShares != nil {
					if err := w("cpu.shares", strconv.FormatUint(*rc.CPUShares, 10)); err != nil {
						return err
					}
				}
				if rc.CPUPeriod != nil {
					if err := w("cpu.cfs_period_us", strconv.FormatUint(*rc.CPUPeriod, 10)); err != nil {
						return err
					}
				}
				if rc.CPUQuota != nil {
					if err := w("cpu.cfs_quota_us", strconv.FormatInt(*rc.CPUQuota, 10)); err != nil {
						return err
					}
				}
			}
		}
		if rc.PidsLimit != nil && has("pids") {
			if err := w("pids.max", strconv.FormatInt(*rc.PidsLimit, 10)); err != nil {
				return err
			}
		}
	}
	return nil
}
