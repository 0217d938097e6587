// Pod workers: one goroutine a pod while it has work, serialized per pod,
// bounded across pods by the work slots (slots.go).

package lifecycle

import (
	"context"
	"math/rand/v2"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/qos"
)

type backoff struct {
	until time.Time
	delay time.Duration
}

// podWorker syncs one pod whenever it is poked and every Resync, until the
// pod is removed or ctx ends.
func (m *Manager) podWorker(ctx context.Context, uid types.UID, st *podState) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			m.mu.Lock()
			st.working = false
			m.mu.Unlock()
			return
		case <-st.kick:
		case <-t.C:
		}
		m.mu.Lock()
		deleting := st.deleting
		m.mu.Unlock()
		m.slots.acquire()
		cctx, cancel := call(ctx)
		sbs, err := m.cfg.Runtime.ListPodSandbox(cctx, map[string]string{cri.PodUIDLabel: string(uid)})
		cancel()
		removed := false
		if err == nil {
			removed = m.syncOne(ctx, uid, st, deleting, sbs)
		} else {
			m.setError(st, "ListFailed", err)
		}
		m.slots.release()
		if removed {
			return
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(m.nextSync(st))
	}
}

// nextSync is Resync, or sooner when a container's back-off ends first. A
// pod whose containers all run is checked every SteadyResync and up to
// half as long again (jitter): a container that exits,
// or a sandbox that stops, meanwhile is caught by the relist, which
// pokes its pod within a Resync, as the kubelet's PLEG relists every
// second while its pod workers resync every minute. On a dense node
// hundreds of idle pods' status calls would otherwise compete with the
// pods being started and cost idle CPU.
func (m *Manager) nextSync(st *podState) time.Duration {
	d := m.cfg.Resync
	m.mu.Lock()
	steady := st.status.Phase == corev1.PodRunning && st.status.Reason == ""
	for _, cs := range st.status.ContainerStatuses {
		if cs.State.Running == nil {
			steady = false
		}
	}
	m.mu.Unlock()
	if steady {
		// Jittered, as the kubelet's pod workers' resync: pods whose
		// syncs waited together (for work slots while a node filled up)
		// would otherwise stay in step, all 250 of a dense node synced
		// in the same second, every minute.
		d = m.cfg.SteadyResync + rand.N(m.cfg.SteadyResync/2)
	}
	now := m.now()
	if left, ok := untilDeadline(st, now); ok && left < d {
		d = left
	}
	for _, b := range st.backoff {
		if !b.until.IsZero() {
			if left := b.until.Sub(now); left > 0 && left < d {
				d = left
			}
		}
	}
	return d
}

// syncOne drives one pod: removal when it is being deleted, else a sync.
// Each pod is handled by its one worker, so its podState fields that only
// the worker uses need no lock.
// It reports whether the pod is gone.
func (m *Manager) syncOne(ctx context.Context, uid types.UID, st *podState, deleting bool, sbs []*runtimeapi.PodSandbox) bool {
	m.mu.Lock()
	evicted := st.evicted != nil
	m.mu.Unlock()
	switch {
	case !deleting && (evicted || m.endPastDeadline(st)):
		m.syncEvicted(ctx, uid, st, sbs)
		return false
	case !deleting:
		m.syncPod(ctx, st, sbs)
		return false
	}
	m.probes.RemovePod(uid) // nothing is probed while it is torn down
	m.events.forget(uid)
	m.mu.Lock()
	g := podGrace(st)
	m.mu.Unlock()
	for _, sb := range sbs {
		var final func(context.Context)
		if m.cfg.OnRemoved != nil && sb.Id == st.sandboxID {
			final = func(ctx context.Context) { m.finalStatus(ctx, st, sb.Id) }
		}
		m.teardown(ctx, sb.Id, sb.GetAnnotations()[AnnotationCgroupParent], g, true, final)
	}
	// The pod's cgroup, by its computed name (a nodeguard restarted
	// since may never have learnt st.parent): processes the runtime does
	// not know of (a sandbox half made when the runtime crashed) are
	// killed, as the kubelet's pod cgroup Destroy does.
	parent := st.parent
	if p, err := m.cfg.Cgroups.Parent(st.pod); err == nil {
		parent = p
	}
	if parent != "" {
		m.removePodCgroup(ctx, parent, true)
	}
	// Volumes go after every process is gone (nothing holds their mounts
	// any more); if they cannot, the pod stays, deleting, and the next
	// sync tries again: a volume is never left half torn down.
	if err := m.teardownVolumes(ctx, uid); err != nil {
		m.setError(st, "VolumeTeardownFailed", err)
		return false
	}
	_ = os.RemoveAll(m.logDir(st.pod))
	_ = os.Remove(m.hostsPath(uid))
	m.forgetEviction(uid)
	if st.source == SourceAPI {
		// Unless the name was applied again meanwhile (its record is
		// the new pod's).
		m.unpersist(st.pod.Namespace, st.pod.Name, uid)
	}
	m.mu.Lock()
	delete(m.pods, uid)
	var final *corev1.Pod
	if m.cfg.OnRemoved != nil {
		final = st.view()
		if st.final != nil {
			final.Status = *st.final
		} else if final.Status.Phase != corev1.PodSucceeded {
			// Nothing ran (no sandbox), or it was gone already.
			final.Status.Phase = corev1.PodFailed
		}
		final.Status.QOSClass = qos.Class(st.pod)
	}
	m.mu.Unlock()
	m.log.Info("pod removed", "pod", key(st.pod))
	if final != nil {
		m.cfg.OnRemoved(final)
	}
	return true
}

// finalStatus makes st's status once the containers of its sandbox id
// are stopped, for OnRemoved: each container as the runtime reports it
// now, the phase terminal, Ready and ContainersReady false.
func (m *Manager) finalStatus(ctx context.Context, st *podState, id string) {
	if !m.stoppedStatus(ctx, st, id) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	final := st.status.DeepCopy()
	allZero := len(final.ContainerStatuses) > 0
	for _, cs := range final.ContainerStatuses {
		if t := cs.State.Terminated; t == nil || t.ExitCode != 0 {
			allZero = false
		}
	}
	final.Phase = corev1.PodFailed
	if allZero && st.evicted == nil {
		final.Phase = corev1.PodSucceeded
	}
	for i := range final.Conditions {
		if c := &final.Conditions[i]; c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
			c.Status = corev1.ConditionFalse
		}
	}
	st.final = final
}
