package kubepods

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/qos"
)

var (
	// ErrUnsupported: the requested layout cannot be made here (no memory
	// controller, the systemd driver without systemd, ...).
	ErrUnsupported = errors.New("unsupported")
	// ErrPopulated: a cgroup still has processes, so it cannot be removed.
	ErrPopulated = cgroups.ErrPopulated
)

// level is a cgroup's place in the pod hierarchy.
type level int

const (
	levelKubepods level = iota
	levelQOS
	levelPod
)

func (l level) String() string {
	switch l {
	case levelKubepods:
		return "node allocatable"
	case levelQOS:
		return "QoS class"
	}
	return "pod"
}

// placer is how a driver makes the hierarchy's cgroups exist with their
// settings and takes them away again; cgroupfs.go and systemd.go are the
// two. Everything else (resolving names to directories, reading, killing,
// listing) is the same for both drivers and lives in Cgroups: a
// systemd slice is a directory at the path its expanded name spells, in
// every hierarchy.
type placer interface {
	// ensure makes the cgroup name (the driver's form, see PodParent)
	// exist with rc applied, idempotently. Its parents exist already:
	// Cgroups ensures kubepods and the QoS cgroups first.
	ensure(ctx context.Context, name string, lv level, rc ResourceConfig) error
	// remove takes away name, which holds no process any more. A cgroup
	// already gone is not an error.
	remove(ctx context.Context, name string, deadline time.Time) error
	close() error
}

// Options configure a Cgroups beyond its driver and root.
type Options struct {
	// NoCPUQuota leaves CPU limits out of the pod cgroups' CFS quota (the
	// kubelet's cpuCFSQuota: false); by default they are enforced.
	NoCPUQuota bool
	// Systemd is the D-Bus connection the systemd driver uses; nil
	// dials systemd (its private socket, then the system bus).
	Systemd SystemdConn
	// Log gets one line per cgroup made or removed at Info, and the
	// driver's warnings. Nil discards them.
	Log *slog.Logger
}

// Cgroups makes, limits, lists, kills and removes the pod cgroup hierarchy
// beneath one root, through one driver.
type Cgroups struct {
	layout *cgroups.Layout
	driver Driver
	root   string
	opts   Options
	placer placer
	log    *slog.Logger

	qosMu   sync.Mutex
	qosLast [2]uint64 // burstable, besteffort shares last written; 0: never
	// qosMilli holds each pod object's burstableMilliCPU from the last
	// UpdateQOS, qosNext this call's (swapped, then cleared): the caller's
	// pod objects are never edited, a changed pod is a new object, and
	// computing the effective requests of 250 pods every second was a
	// third of the agent's allocations.
	qosMilli, qosNext map[*corev1.Pod]int64
}

// New returns a Cgroups for driver beneath root. On a node root is
// absolute ("/": /kubepods with cgroupfs, /kubepods.slice with systemd),
// so that the containers land in the cgroups Cgroups limits whatever
// cgroup the runtime runs in. A relative root (cgroupfs only) is resolved
// beneath this process's own cgroup in each hierarchy: for the private
// test runtime, which shares it.
//
// The systemd driver needs systemd as PID 1 and its D-Bus API: without
// them New fails with ErrUnsupported and says to use cgroupfs.
func New(ctx context.Context, layout *cgroups.Layout, driver Driver, root string, opts Options) (*Cgroups, error) {
	if layout.Memory == nil {
		return nil, fmt.Errorf("pod cgroups: %w: no memory controller mounted", ErrUnsupported)
	}
	if _, err := Name(driver, root); err != nil {
		return nil, fmt.Errorf("pod cgroups: %w", err)
	}
	m := &Cgroups{layout: layout, driver: driver, root: root, opts: opts, log: opts.Log}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	switch driver {
	case Cgroupfs:
		m.placer = &cgroupfsPlacer{m: m}
	case Systemd:
		p, err := newSystemdPlacer(ctx, m)
		if err != nil {
			return nil, err
		}
		m.placer = p
	}
	return m, nil
}

// Close releases the driver's resources (the D-Bus connection).
func (m *Cgroups) Close() error {
	if m.placer == nil {
		return nil
	}
	return m.placer.close()
}

// Driver returns the driver Cgroups places cgroups with.
func (m *Cgroups) Driver() Driver { return m.driver }

// Root returns the cgroup root as configured.
func (m *Cgroups) Root() string { return m.root }

// AbsoluteParents reports whether Cgroups hands the runtime absolute
// cgroup parents: always, except for a relative root on a host with v1
// hierarchies, where this process's cgroup differs between hierarchies
// and only the relative form names the right place in each.
func (m *Cgroups) AbsoluteParents() bool {
	return path.IsAbs(m.root) || m.layout.Mode == cgroups.ModeV2
}

// spell turns a name computed under the configured root into the form
// handed to the runtime and used as the pod's key: on pure cgroup v2 a
// relative name is made absolute against this process's cgroup (as it was
// when the layout was discovered, before a MoveSelfIntoLeaf), so that the
// runtime places containers there whatever cgroup its shims run in.
func (m *Cgroups) spell(name string) string {
	if path.IsAbs(name) || m.layout.Mode != cgroups.ModeV2 || m.layout.Unified == nil {
		return name
	}
	return path.Join(m.layout.Unified.Own, name)
}

// Kubepods is the node-allocatable cgroup that holds every pod, in the
// form Parent uses.
func (m *Cgroups) Kubepods() (string, error) {
	n, err := Name(m.driver, m.root)
	if err != nil {
		return "", err
	}
	return m.spell(n), nil
}

// Parent is the pod's cgroup parent, as handed to the runtime (see
// AbsoluteParents and spell) and as every other method takes it.
func (m *Cgroups) Parent(pod *corev1.Pod) (string, error) {
	n, err := PodParent(m.driver, m.root, qos.Class(pod), pod.UID)
	if err != nil {
		return "", err
	}
	return m.spell(n), nil
}

func (m *Cgroups) qosParent(class corev1.PodQOSClass) (string, error) {
	n, err := QOSParent(m.driver, m.root, class)
	if err != nil {
		return "", err
	}
	return m.spell(n), nil
}

func (m *Cgroups) v2Memory() bool { return m.layout.Memory.V2() }

// Ensure makes the pod's cgroup (and its QoS parents) and applies the
// pod-level limits. It is idempotent.
func (m *Cgroups) Ensure(ctx context.Context, pod *corev1.Pod) (string, error) {
	parent, err := m.Parent(pod)
	if err != nil {
		return "", err
	}
	if err := m.EnsureRoot(ctx); err != nil {
		return "", err
	}
	rc := PodResources(pod, m.v2Memory(), !m.opts.NoCPUQuota)
	if err := m.placer.ensure(ctx, parent, levelPod, rc); err != nil {
		return "", fmt.Errorf("ensure pod cgroup %s: %w", parent, err)
	}
	return parent, nil
}

// EnsureRoot makes kubepods and the QoS cgroups, so that sensing can watch
// them before the first pod. Node allocatable is EnforceAllocatable's.
func (m *Cgroups) EnsureRoot(ctx context.Context) error {
	kube, err := m.Kubepods()
	if err != nil {
		return err
	}
	if err := m.placer.ensure(ctx, kube, levelKubepods, ResourceConfig{}); err != nil {
		return fmt.Errorf("ensure cgroup %s: %w", kube, err)
	}
	for _, class := range []corev1.PodQOSClass{corev1.PodQOSBurstable, corev1.PodQOSBestEffort} {
		p, err := m.qosParent(class)
		if err != nil {
			return err
		}
		if err := m.placer.ensure(ctx, p, levelQOS, ResourceConfig{}); err != nil {
			return fmt.Errorf("ensure cgroup %s: %w", p, err)
		}
	}
	return nil
}

// EnforceAllocatable writes node allocatable on kubepods: capacity minus
// system-reserved minus kube-reserved becomes kubepods' memory limit and
// CPU shares (or weight), as the kubelet's enforceNodeAllocatable=pods
// does. It returns the limits written.
func (m *Cgroups) EnforceAllocatable(ctx context.Context, capacity, systemReserved, kubeReserved corev1.ResourceList) (ResourceConfig, error) {
	kube, err := m.Kubepods()
	if err != nil {
		return ResourceConfig{}, err
	}
	rc := KubepodsResources(capacity, systemReserved, kubeReserved, m.v2Memory())
	if err := m.placer.ensure(ctx, kube, levelKubepods, rc); err != nil {
		return rc, fmt.Errorf("enforce allocatable on %s: %w", kube, err)
	}
	if err := m.EnsureRoot(ctx); err != nil {
		return rc, err
	}
	return rc, nil
}

// UpdateQOS sets the CPU shares (on cgroup v2 the weight) of the QoS
// cgroups from the pods on the node, as the kubelet's QoS container
// manager does (setCPUCgroupConfig): BestEffort the least there is,
// Burstable the shares of the sum of its pods' cpu requests. It writes
// only what changed since its last call, so the lifecycle may call it on
// every pass.
func (m *Cgroups) UpdateQOS(ctx context.Context, pods []*corev1.Pod) error {
	m.qosMu.Lock()
	defer m.qosMu.Unlock()
	if m.qosNext == nil {
		m.qosMilli, m.qosNext = map[*corev1.Pod]int64{}, map[*corev1.Pod]int64{}
	}
	var milliCPU int64
	for _, p := range pods {
		v, ok := m.qosMilli[p]
		if !ok {
			v = burstableMilliCPU(p)
		}
		m.qosNext[p] = v
		milliCPU += v
	}
	m.qosMilli, m.qosNext = m.qosNext, m.qosMilli
	clear(m.qosNext)
	burstable, bestEffort := MilliCPUToShares(milliCPU), MinShares
	for i, q := range []struct {
		class  corev1.PodQOSClass
		shares uint64
	}{{corev1.PodQOSBurstable, burstable}, {corev1.PodQOSBestEffort, bestEffort}} {
		if m.qosLast[i] == q.shares {
			continue
		}
		name, err := m.qosParent(q.class)
		if err != nil {
			return err
		}
		var rc ResourceConfig
		rc.setCPUShares(q.shares, m.v2Memory())
		if err := m.placer.ensure(ctx, name, levelQOS, rc); err != nil {
			return fmt.Errorf("set the cpu shares of %s: %w", name, err)
		}
		m.qosLast[i] = q.shares
	}
	return nil
}

// RemoveRoot removes the (empty) kubepods tree, for tests and a node being
// drained; it fails while any pod cgroup remains.
func (m *Cgroups) RemoveRoot(ctx context.Context) error {
	kube, err := m.Kubepods()
	if err != nil {
		return err
	}
	for _, class := range []corev1.PodQOSClass{corev1.PodQOSBurstable, corev1.PodQOSBestEffort} {
		p, err := m.qosParent(class)
		if err != nil {
			return err
		}
		if err := m.Remove(ctx, p); err != nil {
			return err
		}
	}
	if err := m.Remove(ctx, kube); err != nil {
		return err
	}
	if m.driver == Cgroupfs && !path.IsAbs(m.root) {
		// The relative root's own directories (e.g. nodeguard/) were
		// made by Cgroups too.
		return m.removeDirs(m.spell(m.root))
	}
	return nil
}

// removeWait bounds how long Remove waits, in all, for dying tasks still
// charged to a cgroup (EBUSY on an empty cgroup.procs).
const removeWait = 2 * time.Second

// Remove takes away a cgroup of the hierarchy (a pod's, by its Parent) in
// every hierarchy, leftover empty children first (a container cgroup the
// runtime left behind). A cgroup with processes fails at once with
// ErrPopulated (the caller decides whether they are a leak to Kill or a
// sandbox to adopt); EBUSY on an empty one (a dying task still charged)
// is retried for removeWait in all. A cgroup already gone is not an error.
func (m *Cgroups) Remove(ctx context.Context, parent string) error {
	dirs, err := m.layout.Resolve(parent)
	if err != nil {
		return fmt.Errorf("remove pod cgroup %s: %w", parent, err)
	}
	for _, d := range dirs {
		pids, err := cgroups.TreeProcs(d.Path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove pod cgroup %s: %w", parent, err)
		}
		if len(pids) > 0 {
			return fmt.Errorf("remove pod cgroup %s: %s: %w (pids %v)", parent, d.Path, ErrPopulated, pids)
		}
	}
	if err := m.placer.remove(ctx, parent, time.Now().Add(removeWait)); err != nil {
		return fmt.Errorf("remove pod cgroup %s: %w", parent, err)
	}
	return nil
}

// removeDirs removes name's directory tree in every hierarchy.
func (m *Cgroups) removeDirs(name string) error {
	return m.removeDirsBy(name, time.Now().Add(removeWait))
}

func (m *Cgroups) removeDirsBy(name string, deadline time.Time) error {
	dirs, err := m.layout.Resolve(name)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		if err := cgroups.RemoveTree(d.Path, deadline); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Kill SIGKILLs every process in the pod's cgroups and returns how many
// it signalled by pid. It returns once the signals are sent, without
// waiting for the processes to exit (a hard eviction's "kill sent"):
//   - where the memory controller is on cgroup2 and the kernel has
//     cgroup.kill (5.14), one write kills the whole subtree atomically,
//     new forks included;
//   - otherwise (v1, hybrid: cgroup.kill on the unified tree is written
//     too, but may not reach every process) every pid in cgroup.procs
//     beneath the pod's memory cgroup (which every process of the pod is
//     in) gets SIGKILL, and the walk is repeated, a bounded number of
//     times, while it finds pids it has not signalled yet.
//
// This is how the kubelet's pod cgroup Destroy ends what the runtime no
// longer knows of, and how hard eviction releases memory before the
// runtime is even called. It is the same for both drivers: a systemd
// slice's cgroup is killed through its files, as runc does.
func (m *Cgroups) Kill(parent string) (int, error) { return KillPod(m.layout, parent) }

// KillPod is Cgroups.Kill for a caller with no Cgroups (guard mode, beside
// a kubelet that made the cgroups): it creates nothing.
func KillPod(layout *cgroups.Layout, parent string) (int, error) {
	dirs, err := layout.Resolve(parent)
	if err != nil {
		return 0, fmt.Errorf("kill pod cgroup %s: %w", parent, err)
	}
	for _, d := range dirs {
		if d.Hierarchy.V2() {
			err := cgroups.WriteFile(d.Path, cgroups.FileKill, "1")
			if err == nil && layout.Memory.V2() {
				return 0, nil
			}
			// On a hybrid host the cgroup2 tree need not hold every
			// process (runc may not join it): the memory hierarchy's
			// walk below is what is sure to reach them all.
		}
	}
	mem, err := layout.Memory.Resolve(parent)
	if err != nil {
		return 0, fmt.Errorf("kill pod cgroup %s: %w", parent, err)
	}
	n, err := cgroups.SigkillTree(mem.Path)
	if err != nil {
		return n, fmt.Errorf("kill pod cgroup %s: %w", parent, err)
	}
	return n, nil
}

// containerCgroupNames are the names runtimes give a container's (or
// sandbox's) cgroup beneath its parent, and whether each is the systemd
// driver's: runc's cgroupfs driver under containerd names it by the bare
// id, CRI-O's cgroupfs manager crio-<id>; with the systemd driver they are
// the scopes cri-containerd-<id>.scope and crio-<id>.scope.
func containerCgroupNames(id string) []struct {
	name    string
	systemd bool
} {
	return []struct {
		name    string
		systemd bool
	}{{id, false}, {"cri-containerd-" + id + ".scope", true}, {"crio-" + id + ".scope", true}, {"crio-" + id, false}}
}

func checkContainerID(id string) error {
	if id == "" || id == "." || id == ".." || strings.ContainsAny(id, "/\x00") {
		return fmt.Errorf("%w: container id %q", cgroups.ErrInvalidPath, id)
	}
	return nil
}

// containerDir finds the cgroup directory of container id beneath the
// pod's memory cgroup, and whether the runtime named it the systemd way.
func (m *Cgroups) containerDir(parent, id string) (dir string, scope, ok bool, err error) {
	if err := checkContainerID(id); err != nil {
		return "", false, false, err
	}
	mem, err := m.layout.Memory.Resolve(parent)
	if err != nil {
		return "", false, false, err
	}
	for _, n := range containerCgroupNames(id) {
		d := filepath.Join(mem.Path, n.name)
		if _, err := os.Stat(d); err == nil {
			return d, n.systemd, true, nil
		}
	}
	return "", false, false, nil
}

// KillContainer kills what runs in one container's cgroup beneath the pod
// cgroup parent, and returns how many processes it signalled (0 where
// cgroup.kill did it, or where the container has no cgroup).
//
// It is for a task the runtime has lost track of: a StartContainer cut
// short between the runtime creating the task and reading its pid leaves
// "runc init" waiting in the container's cgroup while the runtime reports
// the container created or exited and refuses to delete it ("cannot
// delete running task", containerd#11037).
func (m *Cgroups) KillContainer(parent, id string) (int, error) {
	dir, _, ok, err := m.containerDir(parent, id)
	if err != nil {
		return 0, fmt.Errorf("kill container %s: %w", id, err)
	}
	if !ok {
		return 0, nil
	}
	n, err := cgroups.Kill(dir, m.v2Memory())
	if err != nil {
		return n, fmt.Errorf("kill container %s: %w", id, err)
	}
	return n, nil
}

// ContainerProcs lists the pids in one container's cgroup beneath the pod
// cgroup parent (its own cgroup.procs in the memory hierarchy), found by
// the name the runtime gives it under either driver: the bare id with
// cgroupfs, cri-containerd-<id>.scope or crio-<id>.scope with systemd. A
// container without a cgroup (never started, or removed) has none.
func (m *Cgroups) ContainerProcs(parent, id string) ([]int, error) {
	dir, _, ok, err := m.containerDir(parent, id)
	if err != nil {
		return nil, fmt.Errorf("list the processes of container %s: %w", id, err)
	}
	if !ok {
		return nil, nil
	}
	pids, err := cgroups.Procs(dir)
	if cgroups.Gone(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the processes of container %s: %w", id, err)
	}
	return pids, nil
}

// SameCgroup reports whether the names a and b (in any spelling the
// Cgroups takes: relative, or absolute) are one cgroup directory in the
// memory hierarchy.
func (m *Cgroups) SameCgroup(a, b string) bool {
	if a == b {
		return true
	}
	da, err := m.layout.Memory.Resolve(a)
	if err != nil {
		return false
	}
	db, err := m.layout.Memory.Resolve(b)
	return err == nil && da.Path == db.Path
}

// Dirs are the cgroup directories of parent in every hierarchy, for
// statistics and eviction.
func (m *Cgroups) Dirs(parent string) ([]cgroups.Dir, error) {
	return m.layout.Resolve(parent)
}

// MemoryDir is the pod's directory in the memory hierarchy: its Rel is
// how snapshots and kernel events name the pod cgroup.
func (m *Cgroups) MemoryDir(parent string) (cgroups.Dir, error) {
	return m.layout.Memory.Resolve(parent)
}

// Procs lists the pids in the pod's memory cgroup and every cgroup
// beneath it.
func (m *Cgroups) Procs(parent string) ([]int, error) {
	d, err := m.MemoryDir(parent)
	if err != nil {
		return nil, err
	}
	return cgroups.TreeProcs(d.Path)
}

// Tasks counts the tasks in the pod cgroup and every cgroup beneath it:
// pids.current of its pids cgroup, the count the pod's pid limit
// (pids.max) applies to (cgroups.Tasks).
func (m *Cgroups) Tasks(parent string) (int64, error) {
	dirs, err := m.layout.Resolve(parent)
	if err != nil {
		return 0, fmt.Errorf("count the tasks of pod cgroup %s: %w", parent, err)
	}
	n, err := cgroups.Tasks(dirs)
	if err != nil {
		return 0, fmt.Errorf("count the tasks of pod cgroup %s: %w", parent, err)
	}
	return n, nil
}

// OpenTaskCounter opens the task count of the pod cgroup, for a caller
// that asks every second (cgroups.TaskCounter); it counts what Tasks
// counts.
func (m *Cgroups) OpenTaskCounter(parent string) (*cgroups.TaskCounter, error) {
	return OpenPodTaskCounter(m.layout, parent)
}

// OpenPodTaskCounter is Cgroups.OpenTaskCounter for a caller with no
// Cgroups.
func OpenPodTaskCounter(layout *cgroups.Layout, parent string) (*cgroups.TaskCounter, error) {
	dirs, err := layout.Resolve(parent)
	if err != nil {
		return nil, fmt.Errorf("count the tasks of pod cgroup %s: %w", parent, err)
	}
	c, err := cgroups.OpenTaskCounter(dirs)
	if err != nil {
		return nil, fmt.Errorf("count the tasks of pod cgroup %s: %w", parent, err)
	}
	return c, nil
}

// PodParents lists the pod cgroups that exist beneath the root (in the
// memory hierarchy), by pod UID, in Parent's form: Guaranteed pods under
// kubepods, Burstable and BestEffort ones under their QoS parents. The
// garbage collector removes those of pods nobody wants.
func (m *Cgroups) PodParents() (map[types.UID]string, error) {
	out := map[types.UID]string{}
	for _, class := range []corev1.PodQOSClass{corev1.PodQOSGuaranteed, corev1.PodQOSBurstable, corev1.PodQOSBestEffort} {
		qp, err := m.qosParent(class)
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
			if !e.IsDir() {
				continue
			}
			uid, ok := PodUIDOf(m.driver, path.Base(qp), e.Name())
			if !ok {
				continue
			}
			if n, err := PodParent(m.driver, m.root, class, uid); err == nil {
				out[uid] = m.spell(n)
			}
		}
	}
	return out, nil
}
