package kubepods

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/lifecycle/qos"
)

// ErrUnsupported: the requested layout cannot be made here.
var ErrUnsupported = errors.New("unsupported")

// Manager makes pod cgroups beneath one root.
type Manager struct {
	layout *cgroups.Layout
	root   string
	// EnforceCPULimits sets CFS quotas from CPU limits (the kubelet's
	// cpuCFSQuota, on by default).
	EnforceCPULimits bool
}

// New returns a Manager for the cgroupfs driver beneath root (relative:
// beneath nodeguard's own cgroup in each hierarchy; absolute: a path
// within each hierarchy).
func New(layout *cgroups.Layout, driver Driver, root string) (*Manager, error) {
	if driver != Cgroupfs {
		return nil, fmt.Errorf("pod cgroups with the %s driver: %w (use cgroupfs)", driver, ErrUnsupported)
	}
	if layout.Memory == nil {
		return nil, fmt.Errorf("pod cgroups: %w: no memory controller mounted", ErrUnsupported)
	}
	return &Manager{layout: layout, root: root, EnforceCPULimits: true}, nil
}

// Parent is the pod's cgroup parent, as handed to CRI (relative when the
// root is).
func (m *Manager) Parent(pod *corev1.Pod) (string, error) {
	return PodParent(Cgroupfs, m.root, qos.Class(pod), pod.UID)
}

func (m *Manager) v2Memory() bool { return m.layout.Memory.V2() }

// Ensure makes the pod's cgroup (and its QoS parents) in every hierarchy
// and writes the pod-level limits. It is idempotent.
func (m *Manager) Ensure(pod *corev1.Pod) (string, error) {
	parent, err := m.Parent(pod)
	if err != nil {
		return "", err
	}
	dirs, err := m.layout.Resolve(parent)
	if err != nil {
		return "", fmt.Errorf("ensure pod cgroup %s: %w", parent, err)
	}
	for _, d := range dirs {
		if err := m.mkdirDelegating(d); err != nil {
			return "", fmt.Errorf("ensure pod cgroup %s: %w", parent, err)
		}
	}
	rc := PodResources(pod, m.v2Memory(), m.EnforceCPULimits)
	if err := writeResources(dirs, rc); err != nil {
		return "", fmt.Errorf("set limits of pod cgroup %s: %w", parent, err)
	}
	return parent, nil
}

// mkdirDelegating makes d and every missing directory above it down from
// the hierarchy's base (nodeguard's own cgroup for a relative root, the
// mount for an absolute one); on cgroup2 every level above d delegates its
// controllers, or d would have no memory.max to write.
func (m *Manager) mkdirDelegating(d cgroups.Dir) error {
	base := d.Hierarchy.Mount
	if !filepath.IsAbs(m.root) {
		base = d.Hierarchy.OwnDir()
	}
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
		if d.Hierarchy.V2() && i < len(levels)-1 && i >= len(levels)-1-m.depth() {
			if err := delegate(l); err != nil {
				return fmt.Errorf("delegate controllers below %s: %w", l, err)
			}
		}
	}
	return nil
}

// depth is how many levels above a pod cgroup must delegate on cgroup2:
// those from the root's parent down (root, kubepods, QoS class, and the
// root's own parents when it is nested), never nodeguard's own cgroup
// when it holds processes: only the levels we made.
func (m *Manager) depth() int {
	return strings.Count(strings.Trim(m.root, "/"), "/") + 4
}

// delegate enables in dir's cgroup.subtree_control the controllers the
// pod hierarchy uses that dir has.
func delegate(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return err
	}
	want := map[string]bool{"memory": true, "cpu": true, "pids": true, "io": true}
	var enable []string
	for _, c := range strings.Fields(string(b)) {
		if want[c] {
			enable = append(enable, "+"+c)
		}
	}
	if len(enable) == 0 {
		return nil
	}
	cur, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err == nil {
		have := strings.Fields(string(cur))
		missing := enable[:0:0]
		for _, e := range enable {
			found := false
			for _, h := range have {
				if "+"+h == e {
					found = true
				}
			}
			if !found {
				missing = append(missing, e)
			}
		}
		if len(missing) == 0 {
			return nil
		}
		enable = missing
	}
	return write(filepath.Join(dir, "cgroup.subtree_control"), strings.Join(enable, " "))
}

func write(name, v string) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(v)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", v, name, err)
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
		if rc.Memory != nil && has("memory") {
			name, v := "memory.limit_in_bytes", strconv.FormatInt(*rc.Memory, 10)
			if v2 {
				name = "memory.max"
			}
			if err := write(filepath.Join(d.Path, name), v); err != nil {
				return err
			}
		}
		if has("cpu") {
			if v2 {
				if rc.CPUWeight != nil {
					if err := write(filepath.Join(d.Path, "cpu.weight"), strconv.FormatUint(*rc.CPUWeight, 10)); err != nil {
						return err
					}
				}
				if rc.CPUQuota != nil && rc.CPUPeriod != nil {
					q := "max"
					if *rc.CPUQuota >= 0 {
						q = strconv.FormatInt(*rc.CPUQuota, 10)
					}
					if err := write(filepath.Join(d.Path, "cpu.max"), q+" "+strconv.FormatUint(*rc.CPUPeriod, 10)); err != nil {
						return err
					}
				}
			} else {
				if rc.CPUShares != nil {
					if err := write(filepath.Join(d.Path, "cpu.shares"), strconv.FormatUint(*rc.CPUShares, 10)); err != nil {
						return err
					}
				}
				if rc.CPUPeriod != nil {
					if err := write(filepath.Join(d.Path, "cpu.cfs_period_us"), strconv.FormatUint(*rc.CPUPeriod, 10)); err != nil {
						return err
					}
				}
				if rc.CPUQuota != nil {
					if err := write(filepath.Join(d.Path, "cpu.cfs_quota_us"), strconv.FormatInt(*rc.CPUQuota, 10)); err != nil {
						return err
					}
				}
			}
		}
		if rc.PidsLimit != nil && has("pids") {
			if err := write(filepath.Join(d.Path, "pids.max"), strconv.FormatInt(*rc.PidsLimit, 10)); err != nil {
				return err
			}
		}
	}
	return nil
}

// EnsureRoot makes the kubepods cgroup (and the QoS parents) in every
// hierarchy, so that sensing can watch it before the first pod.
func (m *Manager) EnsureRoot() error {
	for _, class := range []corev1.PodQOSClass{corev1.PodQOSBurstable, corev1.PodQOSBestEffort} {
		p, err := QOSParent(Cgroupfs, m.root, class)
		if err != nil {
			return err
		}
		dirs, err := m.layout.Resolve(p)
		if err != nil {
			return fmt.Errorf("ensure cgroup %s: %w", p, err)
		}
		for _, d := range dirs {
			if err := m.mkdirDelegating(d); err != nil {
				return fmt.Errorf("ensure cgroup %s: %w", p, err)
			}
		}
	}
	return nil
}

// EnforceAllocatable writes node allocatable on kubepods in every
// hierarchy: capacity minus system-reserved minus kube-reserved becomes
// kubepods' memory limit and CPU shares (or weight), as the kubelet's
// enforceNodeAllocatable=pods does. It returns the limits written.
func (m *Manager) EnforceAllocatable(capacity, systemReserved, kubeReserved corev1.ResourceList) (ResourceConfig, error) {
	if err := m.EnsureRoot(); err != nil {
		return ResourceConfig{}, err
	}
	kube, err := Name(Cgroupfs, m.root)
	if err != nil {
		return ResourceConfig{}, err
	}
	dirs, err := m.layout.Resolve(kube)
	if err != nil {
		return ResourceConfig{}, fmt.Errorf("enforce allocatable on %s: %w", kube, err)
	}
	rc := KubepodsResources(capacity, systemReserved, kubeReserved, m.v2Memory())
	if err := writeResources(dirs, rc); err != nil {
		return rc, fmt.Errorf("enforce allocatable on %s: %w", kube, err)
	}
	return rc, nil
}

// RemoveRoot removes the (empty) kubepods tree and the root itself, for
// tests and a node being drained; it fails while any pod cgroup remains.
func (m *Manager) RemoveRoot() error {
	return m.Remove(m.root)
}

// ErrPopulated: a cgroup still has processes, so it cannot be removed.
var ErrPopulated = errors.New("cgroup still has processes")

// removeWait bounds how long Remove waits, in all, for dying tasks still
// charged to a cgroup (EBUSY on an empty cgroup.procs).
const removeWait = 2 * time.Second

// Remove takes away the pod's cgroup in every hierarchy: leftover empty
// children first (a container cgroup runc left behind), then the pod's.
// A cgroup with processes fails at once with ErrPopulated (the caller
// decides whether they are a leak to Kill or a sandbox to adopt); EBUSY on
// an empty one (a dying task still charged) is retried for removeWait in
// all. It reports the directories it could not remove.
func (m *Manager) Remove(parent string) error {
	dirs, err := m.layout.Resolve(parent)
	if err != nil {
		return fmt.Errorf("remove pod cgroup %s: %w", parent, err)
	}
	deadline := time.Now().Add(removeWait)
	var errs []error
	for _, d := range dirs {
		var all []string
		err := cgroups.Walk(d.Path, func(p string) error {
			all = append(all, p)
			return nil
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		for i := len(all) - 1; i >= 0; i-- {
			if err := rmdir(all[i], deadline); err != nil {
				errs = append(errs, err)
				break // its parents cannot go either
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("remove pod cgroup %s: %w", parent, errors.Join(errs...))
	}
	return nil
}

func rmdir(p string, deadline time.Time) error {
	for {
		err := os.Remove(p)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, syscallEBUSY) {
			return err
		}
		if pids, perr := procs(p); perr == nil && len(pids) > 0 {
			return fmt.Errorf("%s: %w (pids %v)", p, ErrPopulated, pids)
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// procs reads the pids of a cgroup directory (cgroup.procs: only those
// directly in it).
func procs(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%s/cgroup.procs: %q: %w", dir, f, err)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// Kill SIGKILLs every process in the pod's cgroups and returns how many
// it signalled by pid. It returns once the signals are sent, without
// waiting for the processes to exit (a hard eviction's "kill sent"):
//   - where the memory controller is on cgroup2 and the kernel has
//     cgroup.kill (5.14), one write kills the whole subtree atomically,
//     new forks included;
//   - otherwise (v1, hybrid: cgroup.kill on the unified tree is written
//     too, but may not reach every process) every pid in cgroup.procs
//     beneath the pod's memory cgroup
//     (which every process of the pod is in) gets SIGKILL, and the walk is
//     repeated, a bounded number of times, while it finds pids it has not
//     signalled yet (tasks forked meanwhile).
//
// This is how the kubelet's pod cgroup Destroy ends what the runtime no
// longer knows of, and how hard eviction releases memory before the
// runtime is even called.
func (m *Manager) Kill(parent string) (int, error) {
	dirs, err := m.layout.Resolve(parent)
	if err != nil {
		return 0, fmt.Errorf("kill pod cgroup %s: %w", parent, err)
	}
	for _, d := range dirs {
		if d.Hierarchy.V2() {
			err := os.WriteFile(filepath.Join(d.Path, "cgroup.kill"), []byte("1"), 0)
			if err == nil && m.layout.Memory.V2() {
				return 0, nil
			}
			// On a hybrid host the cgroup2 tree need not hold every
			// process (runc may not join it): the memory hierarchy's
			// walk below is what is sure to reach them all.
		}
	}
	mem, err := m.layout.Memory.Resolve(parent)
	if err != nil {
		return 0, fmt.Errorf("kill pod cgroup %s: %w", parent, err)
	}
	n, err := sigkillTree(mem.Path)
	if err != nil {
		return n, fmt.Errorf("kill pod cgroup %s: %w", parent, err)
	}
	return n, nil
}

// KillContainer kills what runs in one container's cgroup beneath the pod
// cgroup parent, and returns how many processes it signalled (0 where
// cgroup.kill did it, or where the container has no cgroup).
//
// It is for a task the runtime has lost track of: a StartContainer cut
// short between the runtime creating the task and reading its pid leaves
// "runc init" waiting in the container's cgroup while the runtime reports
// the container created or exited and refuses to delete it ("cannot
// delete running task", containerd#11037). The runtime names the
// container's cgroup after its id: <parent>/<id> with cgroupfs paths,
// cri-containerd-<id>.scope under systemd.
func (m *Manager) KillContainer(parent, id string) (int, error) {
	if id == "" || id == "." || id == ".." || strings.ContainsAny(id, "/\x00") {
		return 0, fmt.Errorf("kill container cgroup: %w: container id %q", cgroups.ErrInvalidPath, id)
	}
	mem, err := m.layout.Memory.Resolve(parent)
	if err != nil {
		return 0, fmt.Errorf("kill container %s: %w", id, err)
	}
	for _, name := range []string{id, "cri-containerd-" + id + ".scope"} {
		dir := filepath.Join(mem.Path, name)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		if m.layout.Memory.V2() {
			if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err == nil {
				return 0, nil
			}
		}
		n, err := sigkillTree(dir)
		if err != nil {
			return n, fmt.Errorf("kill container %s: %w", id, err)
		}
		return n, nil
	}
	return 0, nil
}

// sigkillTree sends SIGKILL to every pid in cgroup.procs at and beneath
// root, walking again while it finds pids it has not signalled yet (tasks
// forked meanwhile), a bounded number of times.
func sigkillTree(root string) (int, error) {
	signalled := map[int]bool{}
	for round := 0; round < 10; round++ {
		fresh := 0
		err := cgroups.Walk(root, func(p string) error {
			pids, err := procs(p)
			if err != nil {
				return nil // removed meanwhile
			}
			for _, pid := range pids {
				if signalled[pid] {
					continue
				}
				signalled[pid] = true
				fresh++
				_ = unix.Kill(pid, unix.SIGKILL)
			}
			return nil
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return len(signalled), err
		}
		if fresh == 0 {
			break
		}
	}
	return len(signalled), nil
}

// Dirs are the pod's cgroup directories, for statistics and eviction.
func (m *Manager) Dirs(parent string) ([]cgroups.Dir, error) {
	return m.layout.Resolve(parent)
}

// MemoryDir is the pod's directory in the memory hierarchy: its Rel is
// how snapshots and kernel events name the pod cgroup.
func (m *Manager) MemoryDir(parent string) (cgroups.Dir, error) {
	return m.layout.Memory.Resolve(parent)
}

// Procs lists the pids in the pod's memory cgroup and every cgroup
// beneath it.
func (m *Manager) Procs(parent string) ([]int, error) {
	d, err := m.MemoryDir(parent)
	if err != nil {
		return nil, err
	}
	var all []int
	err = cgroups.Walk(d.Path, func(p string) error {
		pids, err := procs(p)
		if err == nil {
			all = append(all, pids...)
		}
		return nil
	})
	return all, err
}

// PodParents lists the pod cgroups that exist beneath the root (in the
// memory hierarchy), by pod UID: Guaranteed pods under kubepods,
// Burstable and BestEffort ones under their QoS parents. The garbage
// collector removes those of pods nobody wants.
func (m *Manager) PodParents() (map[types.UID]string, error) {
	out := map[types.UID]string{}
	for _, class := range []corev1.PodQOSClass{corev1.PodQOSGuaranteed, corev1.PodQOSBurstable, corev1.PodQOSBestEffort} {
		qp, err := QOSParent(Cgroupfs, m.root, class)
		if err != nil {
			return nil, err
		}
		d, err := m.layout.Memory.Resolve(qp)
		if err != nil {
			return nil, err
		}
		ents, err := os.ReadDir(d.Path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list pod cgroups: %w", err)
		}
		for _, e := range ents {
			uid, ok := strings.CutPrefix(e.Name(), PodPrefix)
			if !ok || !e.IsDir() {
				continue
			}
			if p, err := PodParent(Cgroupfs, m.root, class, types.UID(uid)); err == nil {
				out[types.UID(uid)] = p
			}
		}
	}
	return out, nil
}
