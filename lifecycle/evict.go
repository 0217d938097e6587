package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/evictionapi"
	"github.com/nodeguard/nodeguard/internal/statestore"
	"github.com/nodeguard/nodeguard/oomadj"
	"github.com/nodeguard/nodeguard/qos"
)

// ReasonEvicted is the pod status reason of an evicted pod, as the
// kubelet writes it.
const ReasonEvicted = "Evicted"

// KindEviction is the state store's kind of an eviction record, keyed by
// the pod's UID: the pod ended by the eviction manager (or its active
// deadline) is never started again, across restarts, until it is deleted.
var KindEviction = statestore.Kind{Name: "eviction", Version: 1}

// eviction is what is kept of an evicted pod: it is Failed, its
// containers and sandbox gone, until it is deleted (the kubelet keeps
// evicted pods for their controllers to see; nodeguard keeps them for
// `pod ls`). It is persisted (KindEviction), so a restarted nodeguard does
// not run an evicted pod again.
//
// A pod past its activeDeadlineSeconds ends the same way, with its own
// Reason (deadline.go); so does a pod rejected at its re-admission after a
// restart (restore.go), which is not persisted and keeps its volumes.
type evictionRecord struct {
	// Reason is the pod status reason; ReasonEvicted when empty (records
	// written before there were others).
	Reason  string        `json:"reason,omitempty"`
	Message string        `json:"message"`
	Grace   time.Duration `json:"grace"`
	At      time.Time     `json:"at"`
	// rejected: the pod was rejected at re-admission (restore.go): its
	// containers are stopped, its volumes kept, nothing is recorded, and
	// a restart admits it again.
	rejected bool
}

// Validate refuses a record that no eviction wrote.
func (e *evictionRecord) Validate() error {
	switch {
	case e.Grace < 0:
		return fmt.Errorf("negative grace period %s", e.Grace)
	case e.At.IsZero():
		return errors.New("no time")
	}
	return nil
}

// reason is the pod status reason of the ended pod.
func (e *evictionRecord) reason() string {
	if e.Reason == "" {
		return ReasonEvicted
	}
	return e.Reason
}

// decodeEviction decodes and validates one KindEviction record (what
// loadEviction does with it, and what FuzzEvictionRecord drives).
func decodeEviction(r statestore.Record) (*evictionRecord, error) {
	var e evictionRecord
	if err := statestore.Decode(r, &e); err != nil {
		return nil, err
	}
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("validate %s: %w", r.Key, err)
	}
	return &e, nil
}

// recordEviction persists ev for the pod uid, atomically and durably.
func (m *Manager) recordEviction(uid types.UID, ev *evictionRecord) error {
	if err := m.state.Put(KindEviction, string(uid), ev); err != nil {
		return fmt.Errorf("record the eviction of pod %s: %w", uid, err)
	}
	return nil
}

// forgetEviction removes the eviction record of the pod uid (deleted).
func (m *Manager) forgetEviction(uid types.UID) {
	if err := m.state.Delete(KindEviction, string(uid)); err != nil {
		m.log.Warn("forget the eviction record", "uid", uid, "err", err)
	}
}

// loadEviction reads the eviction record of the pod uid: nil when the pod
// was not ended. A record that cannot be read is never taken for "not
// evicted": the pod is kept stopped, Failed as evicted with a message that
// says why (evicted is what the record most likely said, and a pod that
// must not run costs less stopped than a pod killed for memory running
// again), and a readable record saying so replaces the quarantined one,
// so that the next start does not run it either. Deleting the pod (and
// applying it again) runs it.
func (m *Manager) loadEviction(uid types.UID) *evictionRecord {
	r, ok, err := m.state.Get(KindEviction, string(uid))
	if err == nil && ok {
		var ev *evictionRecord
		if ev, err = decodeEviction(r); err == nil {
			return ev
		}
		err = m.state.Reject(KindEviction, string(uid), err)
	}
	if err == nil {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.legacyEvictions[uid] // one not migrated (statestore failed)
	}
	ev := &evictionRecord{Reason: ReasonEvicted, At: m.now(),
		Message: "The pod's eviction record could not be read; the pod is kept stopped as evicted: " + err.Error()}
	m.log.Error("eviction record unreadable: the pod is kept stopped, as evicted", "uid", uid, "err", err)
	if errors.Is(err, statestore.ErrCorrupt) {
		// A record of a newer agent (ErrUnsupported) stays as it is.
		if err := m.recordEviction(uid, ev); err != nil {
			m.log.Error("eviction record not rewritten", "uid", uid, "err", err)
		}
	}
	return ev
}

// EvictionActor is the lifecycle as the eviction manager acts through it.
type EvictionActor struct {
	m *Manager
	// Exempt pods ("namespace/name") are never evicted.
	Exempt map[string]bool

	// raiser holds, per pod, the processes SetOOMScoreAdj raised.
	raiser oomadj.Raiser

	// cgMu guards cgs: per pod, what Pods found of its cgroup, so that a
	// tick reads one file per pod (its task count) instead of resolving
	// the cgroup, taking its id and opening pids.current again.
	cgMu sync.Mutex
	cgs  map[types.UID]*podCgroup
}

// podCgroup is a pod cgroup as Pods last found it. The task counter's
// kept file tells when the cgroup was removed (and perhaps made again
// under the same path, with a new id): it is then found anew.
type podCgroup struct {
	parent string
	rel    string
	id     uint64
	tasks  *cgroups.TaskCounter
	// spec holds what Pods derives from the pod object alone, for the
	// object it was derived from: the manager never edits a pod's object
	// (a changed pod is a new one), so the same pointer means the same
	// figures. Computing them (the defaulted,
	// effective requests above all) for 250 pods every tick was a tenth
	// of the agent's idle CPU.
	spec    *corev1.Pod
	derived podSpecFigures
}

// podSpecFigures are the parts of an evictionapi.Pod that only the pod's spec
// and metadata decide.
type podSpecFigures struct {
	qos              corev1.PodQOSClass
	priority         int32
	critical         bool
	memoryRequest    int64
	ephemeralRequest int64
	grace            time.Duration
}

func (c *podCgroup) figures(p *corev1.Pod) podSpecFigures {
	if c.spec != p {
		req := qos.PodRequests(p)
		c.spec, c.derived = p, podSpecFigures{
			qos: qos.Class(p), priority: qos.Priority(p), critical: qos.IsCritical(p),
			memoryRequest: req.Memory().Value(), ephemeralRequest: req.StorageEphemeral().Value(),
			grace: grace(p),
		}
	}
	return c.derived
}

func (c *podCgroup) close() {
	if c.tasks != nil {
		_ = c.tasks.Close()
	}
}

// EvictionActor returns the evictionapi.Actor of this manager.
func (m *Manager) EvictionActor(exempt []string) *EvictionActor {
	a := &EvictionActor{m: m, Exempt: map[string]bool{}}
	for _, e := range exempt {
		a.Exempt[e] = true
	}
	return a
}

var _ evictionapi.Actor = (*EvictionActor)(nil)

// Pods lists the pods that run (have a pod cgroup and are neither being
// deleted nor evicted), as the eviction policy sees them; calm leaves
// their task counts unread.
func (a *EvictionActor) Pods(calm bool) []evictionapi.PodRef {
	m := a.m
	m.mu.Lock()
	type item struct {
		pod    *corev1.Pod
		parent string
		source string
	}
	var items []item
	for _, st := range m.pods {
		if st.deleting || st.evicted != nil || st.parent == "" {
			continue
		}
		items = append(items, item{st.pod, st.parent, st.source})
	}
	m.mu.Unlock()
	a.cgMu.Lock()
	defer a.cgMu.Unlock()
	if a.cgs == nil {
		a.cgs = map[types.UID]*podCgroup{}
	}
	listed := make(map[types.UID]bool, len(items))
	out := make([]evictionapi.PodRef, 0, len(items))
	for _, it := range items {
		p := it.pod
		listed[p.UID] = true
		c, pids, pidsErr, err := a.podCgroup(p.UID, it.parent, !calm)
		if err != nil {
			continue
		}
		f := c.figures(p)
		// The figures the kubelet ranks pid.available and the inodesFree
		// signals by: the pod cgroup's tasks, read now (one small file:
		// a fork bomb grows between storage samples), and the inodes of
		// the last storage sample.
		inodes, inodesKnown := m.inodeUsage(p.UID)
		ref := evictionapi.PodRef{CgroupRel: c.rel, Pod: evictionapi.Pod{
			UID: p.UID, Namespace: p.Namespace, Name: p.Name, QOS: f.qos, Priority: f.priority,
			Critical: f.critical, Exempt: a.Exempt[p.Namespace+"/"+p.Name], Static: staticSource(it.source),
			MemoryRequest: f.memoryRequest, EphemeralRequest: f.ephemeralRequest,
			EphemeralUsage: m.ephemeralUsage(p.UID),
			Inodes:         inodes,
			InodesUnknown:  !inodesKnown,
			PIDs:           pids,
			PIDsUnknown:    pidsErr != nil,
			GracePeriod:    f.grace,
			// The pod cgroup's id: the manager attributes an OOM kill by
			// it while the cgroup is not in its last snapshot yet (0:
			// unknown, the cgroup is gone).
			CgroupID: c.id,
		}}
		out = append(out, ref)
	}
	for uid, c := range a.cgs {
		if !listed[uid] {
			c.close()
			delete(a.cgs, uid)
		}
	}
	return out
}

// podCgroup returns the pod's cgroup under parent and, with count, its
// task count now (else errNotCounted), found anew when it is not known
// yet, is of another parent, or was removed since (as a count finds).
// err: its memory directory cannot be resolved (the pod is left out). The
// caller holds a.cgMu.
func (a *EvictionActor) podCgroup(uid types.UID, parent string, count bool) (c *podCgroup, pids int64, pidsErr, err error) {
	if c = a.cgs[uid]; c != nil && c.parent == parent && c.tasks != nil {
		if !count {
			return c, 0, errNotCounted, nil
		}
		pids, pidsErr = c.tasks.Count()
		if pidsErr == nil || !errors.Is(pidsErr, fs.ErrNotExist) {
			return c, pids, pidsErr, nil
		}
	}
	if c != nil {
		c.close()
		delete(a.cgs, uid)
	}
	cg := a.m.cfg.Cgroups
	d, err := cg.MemoryDir(parent)
	if err != nil {
		return nil, 0, nil, err
	}
	c = &podCgroup{parent: parent, rel: d.Rel}
	if id, err := cgroups.ID(d.Path); err == nil {
		c.id = id
	}
	c.tasks, pidsErr = cg.OpenTaskCounter(parent)
	if pidsErr == nil {
		pids, pidsErr = c.tasks.Count()
	}
	if c.id != 0 && c.tasks != nil {
		// Kept only whole: a cgroup without its id or count is found
		// again at the next tick.
		a.cgs[uid] = c
	}
	return c, pids, pidsErr, nil
}

// errNotCounted is a calm listing's task count (EvictionActor.Pods).
var errNotCounted = errors.New("task count not read: calm")

// Evict ends a pod as the eviction manager decided. Hard (grace 0): every
// process in the pod's cgroups is SIGKILLed first, so memory is released
// before any runtime call; the runtime stop and removal, the pod cgroup
// and the volumes follow in the pod's worker. Soft: the worker stops the
// containers with the grace period. Either way the pod becomes Failed,
// reason Evicted, and is never started again.
func (a *EvictionActor) Evict(ctx context.Context, d evictionapi.Decision) error {
	m := a.m
	start := time.Now()
	m.mu.Lock()
	locked := time.Now()
	st, ok := m.pods[d.Victim.UID]
	if !ok || st.deleting {
		m.mu.Unlock()
		return fmt.Errorf("evict %s/%s: %w", d.Victim.Namespace, d.Victim.Name, ErrNotFound)
	}
	if st.evicted != nil {
		// Already on its way. A hard decision escalates a graceful stop:
		// kill now, and tear down without grace.
		if !d.Hard {
			m.mu.Unlock()
			return nil
		}
		st.evicted.Grace = 0
		parent := st.parent
		m.mu.Unlock()
		if parent != "" {
			if _, err := m.cfg.Cgroups.Kill(parent); err != nil {
				return fmt.Errorf("evict %s/%s: %w", d.Victim.Namespace, d.Victim.Name, err)
			}
		}
		st.poke()
		return nil
	}
	g := d.GracePeriod
	if d.Hard {
		g = 0
	}
	ev := &evictionRecord{Message: d.Message, Grace: g, At: m.now()}
	st.evicted = ev
	st.status.Phase = corev1.PodFailed
	st.status.Reason, st.status.Message = ReasonEvicted, d.Message
	parent := st.parent
	pod := st.pod
	rec := *ev // st.evicted's Grace may change (a hard decision) while it is written
	m.mu.Unlock()

	// The record is staged before the kill (written and renamed into
	// place, tens of microseconds: an agent that dies after the kill
	// finds it) and made durable after it (an fsync, which under memory
	// pressure may wait on writeback: the memory comes first). It is
	// durable before the worker is told and before Evict returns (the
	// eviction is reported done).
	var errs []error
	durable, err := m.state.Stage(KindEviction, string(pod.UID), &rec)
	if err != nil {
		m.log.Warn("eviction record not staged before the kill; written after it", "pod", key(pod), "err", err)
	}
	killStart := time.Now()
	if d.Hard && parent != "" {
		if _, err := m.cfg.Cgroups.Kill(parent); err != nil {
			errs = append(errs, err)
		}
	}
	killed := time.Now()
	if durable != nil {
		if err := durable(); err != nil {
			errs = append(errs, fmt.Errorf("record the eviction of pod %s: %w", pod.UID, err))
		}
	} else {
		errs = append(errs, m.recordEviction(pod.UID, &rec))
	}
	st.poke()
	// The stages of the eviction manager's kill_latency that are spent
	// here: waiting for the pod manager's lock, the kill itself and
	// recording the eviction.
	m.log.Info("pod evicted", "pod", key(pod), "hard", d.Hard, "grace", g, "message", d.Message,
		"lock_wait", locked.Sub(start), "kill", killed.Sub(killStart), "record", time.Since(killed))
	// The kubelet's event on the pod (after the kill: it waits for nothing).
	m.event(pod, "", corev1.EventTypeWarning, ReasonEvicted, d.Message)
	return errors.Join(errs...)
}

// syncEvicted tears an evicted pod down: its sandboxes (containers
// stopped with the eviction's grace period), processes the runtime lost
// track of, its cgroup and its volumes (a memory emptyDir's pages are
// only freed once its tmpfs is unmounted), except a rejected pod's. The pod is kept, Failed, until
// it is deleted; its logs stay for `pod logs`.
func (m *Manager) syncEvicted(ctx context.Context, uid types.UID, st *podState, sbs []*runtimeapi.PodSandbox) {
	m.probes.RemovePod(uid)
	for _, sb := range sbs {
		var stopped func(context.Context)
		if sb.Id == st.sandboxID {
			stopped = func(ctx context.Context) { m.stoppedStatus(ctx, st, sb.Id) }
		}
		m.teardown(ctx, sb.Id, sb.GetAnnotations()[AnnotationCgroupParent], st.evicted.Grace, true, stopped)
	}
	m.mu.Lock()
	unknownStopped(&st.status)
	m.mu.Unlock()
	if parent, err := m.cfg.Cgroups.Parent(st.pod); err == nil {
		m.removePodCgroup(ctx, parent, true)
	}
	if st.evicted.rejected {
		return // its volumes wait for its re-admission or its deletion (restore.go)
	}
	if err := m.teardownVolumes(ctx, uid); err != nil {
		m.log.Warn("evicted pod: tear down volumes", "pod", key(st.pod), "err", err)
	}
}

// stoppedStatus takes st's status from its stopped containers in sandbox
// id, before they are removed: each container as the runtime reports it
// now (terminated: exit code, reason, times), and no longer ready; an
// evicted pod keeps the eviction's phase and reason. It reports whether
// the containers could be read.
func (m *Manager) stoppedStatus(ctx context.Context, st *podState, id string) bool {
	cctx, cancel := call(ctx)
	ctrs, err := m.cfg.Runtime.ListContainers(cctx, id, nil)
	cancel()
	if err != nil {
		m.log.Warn("list the stopped containers", "pod", key(st.pod), "err", err)
		return false
	}
	m.updateStatus(ctx, st, ctrs, nil, true, false, true)
	return true
}

// unknownStopped marks every container of an evicted pod's status that
// does not show terminated (its stopped state could not be read: the
// sandbox was gone, the runtime did not answer) as the kubelet's
// TerminatePod does, and the pod as not ready: no container of it runs
// once its sandboxes are torn down, and a status that still said so
// would keep the API from ever seeing the pod Failed.
func unknownStopped(status *corev1.PodStatus) {
	for _, list := range [][]corev1.ContainerStatus{status.InitContainerStatuses, status.ContainerStatuses} {
		for i := range list {
			cs := &list[i]
			if cs.State.Terminated != nil {
				continue
			}
			var started metav1.Time
			if cs.State.Running != nil {
				started = cs.State.Running.StartedAt
			}
			cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "ContainerStatusUnknown",
				Message: "The container could not be located when the pod was terminated", StartedAt: started}}
			cs.Ready = false
			f := false
			cs.Started = &f
		}
	}
	for i := range status.Conditions {
		if c := &status.Conditions[i]; c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
			c.Status = corev1.ConditionFalse
		}
	}
}
