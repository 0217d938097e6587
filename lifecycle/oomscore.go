package lifecycle

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/evictionapi"
	"github.com/nodeguard/nodeguard/internal/statestore"
	"github.com/nodeguard/nodeguard/oomadj"
	"github.com/nodeguard/nodeguard/qos"
)

// RepairOOMScoreAdj makes the actor keep its oom_score_adj raise records
// in store (oomadj.RecordKind), then puts back what an agent that died
// left raised (oomadj.Raiser.Repair). It is called once at start, before
// the eviction manager runs, with or without eviction: the processes a
// dead agent raised are owed their values either way. A pod whose record
// could not be read gets the kubelet's value (restoreLost).
func (a *EvictionActor) RepairOOMScoreAdj(store *statestore.Store) (oomadj.Repaired, error) {
	m := a.m
	a.raiser.Persist(store, m.log)
	return a.raiser.Repair(a.clamp, a.restoreLost)
}

func (a *EvictionActor) clamp(v int) int {
	v, _ = qos.ClampForCapability(v, a.m.cfg.HasCapSysResource, a.m.cfg.MinOOMScoreAdj)
	return v
}

// restoreLost is the fallback for a pod whose raise record could not be
// read: each of its processes that still has the raised value gets the
// highest value the kubelet's policy gives its containers (oomadj.Due).
// A pod the manager does not know (yet) with its cgroup is left, logged.
func (a *EvictionActor) restoreLost(uid types.UID) error {
	m := a.m
	m.mu.Lock()
	st, ok := m.pods[uid]
	var parent string
	var pod *corev1.Pod
	if ok {
		parent, pod = st.parent, st.pod
	}
	m.mu.Unlock()
	if pod == nil || parent == "" {
		m.log.Warn("oom_score_adj: a raise record could not be read and its pod is not known here: its processes keep the raised value",
			"uid", string(uid), "raised", evictionapi.NextVictimOOMScoreAdj)
		return nil
	}
	due, err := oomadj.Due(pod, m.cfg.MemoryCapacity)
	if err != nil {
		return fmt.Errorf("restore oom_score_adj of %s: %w", key(pod), err)
	}
	due = a.clamp(due)
	pids, err := m.cfg.Cgroups.Procs(parent)
	if err != nil {
		return fmt.Errorf("restore oom_score_adj of %s: %w", key(pod), err)
	}
	n, err := oomadj.Unraise(pids, evictionapi.NextVictimOOMScoreAdj, due)
	m.log.Warn("oom_score_adj: a raise record could not be read; the pod's raised processes get the kubelet's value",
		"pod", key(pod), "uid", string(uid), "oom_score_adj", due, "written", n)
	if err != nil {
		return fmt.Errorf("restore oom_score_adj of %s: %w", key(pod), err)
	}
	return nil
}

// SetOOMScoreAdj writes adj to every process of the pod, the sandbox's
// included (raising the next victim, so that the kernel OOM killer, if it
// fires anyway, takes the pod nodeguard would have evicted). It records
// what each process had, for RestoreOOMScoreAdj; called again before
// Restore, it keeps the values from before the first call.
func (a *EvictionActor) SetOOMScoreAdj(uid types.UID, adj int) error {
	m := a.m
	m.mu.Lock()
	st, ok := m.pods[uid]
	parent := ""
	if ok {
		parent = st.parent
	}
	m.mu.Unlock()
	if parent == "" {
		return fmt.Errorf("set oom_score_adj of pod %s: %w", uid, ErrNotFound)
	}
	pids, err := m.cfg.Cgroups.Procs(parent)
	if err != nil {
		return fmt.Errorf("set oom_score_adj of pod %s: %w", uid, err)
	}
	if err := a.raiser.Raise(uid, pids, adj); err != nil {
		return fmt.Errorf("set oom_score_adj of pod %s: %w", uid, err)
	}
	return nil
}

// RestoreOOMScoreAdj undoes SetOOMScoreAdj: every process it raised that
// still runs (same pid, same start time) gets back the value it had, the
// sandbox's pause process too; a container process that joined since gets
// the kubelet's value for its container. Without CAP_SYS_RESOURCE a value
// below the runtime's minimum cannot be written back, and is clamped as
// when the container was created (qos.ClampForCapability).
func (a *EvictionActor) RestoreOOMScoreAdj(uid types.UID) error {
	_, restored, err := a.raiser.Restore(uid, a.clamp)
	var errs []error
	if err != nil {
		errs = append(errs, fmt.Errorf("restore oom_score_adj of pod %s: %w", uid, err))
	}
	errs = append(errs, a.restoreJoined(uid, restored))
	return errors.Join(errs...)
}

// restoreJoined gives the kubelet's value to the container processes of
// the pod that RestoreOOMScoreAdj did not restore: those that joined after
// the raise (a fork inherits its parent's raised value).
func (a *EvictionActor) restoreJoined(uid types.UID, restored map[int]bool) error {
	m := a.m
	m.mu.Lock()
	st, ok := m.pods[uid]
	var sandbox, parent string
	var pod *corev1.Pod
	if ok {
		sandbox, parent, pod = st.sandboxID, st.parent, st.pod
	}
	m.mu.Unlock()
	if !ok || sandbox == "" || parent == "" {
		return nil // gone: nothing to restore
	}
	cctx, cancel := call(context.Background())
	ctrs, err := m.cfg.Runtime.ListContainers(cctx, sandbox, nil)
	cancel()
	if err != nil {
		return fmt.Errorf("restore oom_score_adj of %s: %w", key(pod), err)
	}
	var errs []error
	for _, c := range ctrs {
		spec := findContainer(pod, c.GetMetadata().GetName())
		if spec == nil {
			continue
		}
		adj, err := qos.OOMScoreAdj(pod, spec, m.cfg.MemoryCapacity)
		if err != nil {
			continue
		}
		adj, _ = qos.ClampForCapability(adj, m.cfg.HasCapSysResource, m.cfg.MinOOMScoreAdj)
		pids, err := m.cfg.Cgroups.ContainerProcs(parent, c.Id)
		if err != nil {
			errs = append(errs, fmt.Errorf("restore oom_score_adj of %s: %w", key(pod), err))
			continue
		}
		for _, pid := range pids {
			if restored[pid] {
				continue
			}
			if err := oomadj.Write(pid, adj); err != nil && !oomadj.Exited(err) {
				errs = append(errs, fmt.Errorf("restore oom_score_adj of %s: %w", key(pod), err))
			}
		}
	}
	return errors.Join(errs...)
}

func findContainer(pod *corev1.Pod, name string) *corev1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	return nil
}
