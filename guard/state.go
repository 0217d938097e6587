package guard

import (
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/evictionapi"
	"github.com/nodeguard/nodeguard/internal/statestore"
	"github.com/nodeguard/nodeguard/oomadj"
	"github.com/nodeguard/nodeguard/qos"
)

// KindRemoval is the state store's kind of the pods guard mode evicted,
// keyed by the pod's UID: the hold that hides the sandbox the pod was
// evicted in (evictedHold from the eviction) and, for a hard eviction,
// the removal through the API server still to make. A record is written
// when the pod is evicted (after the kill: the memory comes first) and
// removed once its removal is made and its hold is over; New resumes
// every record left by an agent that died, so that a pod whose cgroup it
// killed is still marked Evicted and deleted (else the kubelet restarts it
// and, hidden by no one's hold, it is killed again and again).
//
// What the store cannot give back: a kill whose record was never written
// (the agent died within the fsync after the kill). The node does not
// tell such a pod from others: its killed sandbox is soon NotReady and out
// of the runtime's ready sandboxes, and a sandbox whose processes were all
// SIGKILLed looks the same whoever sent the signal (the kubelet after a
// grace period, an operator, a node shutdown). Marking a pod Evicted and
// deleting it on that evidence would remove pods guard mode never
// evicted; it is not attempted, and the pod runs again under the kubelet.
var KindRemoval = statestore.Kind{Name: "guard-removal", Version: 1}

// removalRecord is a KindRemoval record.
type removalRecord struct {
	Namespace string             `json:"namespace"`
	Name      string             `json:"name"`
	QOS       corev1.PodQOSClass `json:"qos"`
	Cgroup    string             `json:"cgroup"`
	Static    bool               `json:"static,omitempty"`
	// Sandbox is the sandbox the pod was evicted in: hidden while it is
	// found, until evictedHold after At.
	Sandbox string    `json:"sandbox"`
	At      time.Time `json:"at"`
	// Pending: the hard eviction's removal through the API server is
	// still to make, with Message.
	Pending bool   `json:"pending,omitempty"`
	Message string `json:"message,omitempty"`
}

// Validate refuses a record no eviction wrote.
func (r *removalRecord) Validate() error {
	switch {
	case r.Namespace == "" || r.Name == "" || strings.Contains(r.Namespace+r.Name, "/"):
		return fmt.Errorf("pod %q/%q: not a pod's name", r.Namespace, r.Name)
	case r.Sandbox == "":
		return errors.New("no sandbox")
	case r.At.IsZero():
		return errors.New("no eviction time")
	}
	switch r.QOS {
	case corev1.PodQOSGuaranteed, corev1.PodQOSBurstable, corev1.PodQOSBestEffort:
	default:
		return fmt.Errorf("QoS class %q", r.QOS)
	}
	return nil
}

// resume takes back the records an agent that died left (New, before
// Run and before any eviction): each hold hides its sandbox again for
// what is left of evictedHold, and each pending removal is made once Run
// runs (through the API server: with none, it is kept for an agent that
// has one). A store that cannot be listed is logged: guard mode guards
// without its records rather than not at all.
func (a *Actor) resume() {
	if a.cfg.State == nil {
		return
	}
	entries, err := statestore.ListOf[removalRecord](a.cfg.State, KindRemoval)
	if err != nil {
		a.log.Error("guard: the evicted pods' records could not be read; none resumed", "err", err)
		return
	}
	for _, e := range entries {
		uid, r := types.UID(e.Key), e.Value
		p := Pod{UID: uid, Namespace: r.Namespace, Name: r.Name, QOS: r.QOS, Cgroup: r.Cgroup, SandboxID: r.Sandbox, Static: r.Static}
		a.evicted[uid] = evictedPod{pod: p, sandbox: r.Sandbox, at: r.At}
		if r.Pending {
			a.pending[uid] = &removal{pod: p, message: r.Message, at: r.At}
		}
		a.recorded[uid] = true
		a.log.Info("guard: an evicted pod resumed from the state store", "pod", r.Namespace+"/"+r.Name, "uid", uid,
			"sandbox", r.Sandbox, "since", time.Since(r.At), "removal_pending", r.Pending, "api", a.cfg.Client != nil)
	}
}

// keepRecordLocked reports whether the pod's record is still needed: its
// removal is pending, or its hold is not over. a.mu is held.
func (a *Actor) keepRecordLocked(uid types.UID) bool {
	if a.pending[uid] != nil {
		return true
	}
	e, ok := a.evicted[uid]
	return ok && time.Since(e.at) < evictedHold
}

// persist writes the pod's record as the actor holds it now, or removes
// it when it is no longer needed. Writes are ordered by storeMu and made
// outside a.mu (an fsync must not hold up Pods). A write that fails is
// logged: the pod is acted on all the same.
func (a *Actor) persist(uid types.UID) {
	if a.cfg.State == nil {
		return
	}
	a.storeMu.Lock()
	defer a.storeMu.Unlock()
	a.mu.Lock()
	r, keep := a.recordLocked(uid)
	was := a.recorded[uid]
	a.mu.Unlock()
	var err error
	switch {
	case keep:
		err = a.cfg.State.Put(KindRemoval, string(uid), r)
	case was:
		err = a.cfg.State.Delete(KindRemoval, string(uid))
	default:
		return
	}
	if err != nil {
		a.log.Warn("guard: the evicted pod's record", "uid", uid, "keep", keep, "err", err)
		return
	}
	a.mu.Lock()
	if keep {
		a.recorded[uid] = true
	} else {
		delete(a.recorded, uid)
	}
	a.mu.Unlock()
}

// recordLocked is the pod's record as the actor holds it now, and whether
// one is needed. a.mu is held.
func (a *Actor) recordLocked(uid types.UID) (removalRecord, bool) {
	var r removalRecord
	if !a.keepRecordLocked(uid) {
		return r, false
	}
	e, held := a.evicted[uid]
	p := e.pod
	if rm := a.pending[uid]; rm != nil {
		r.Pending, r.Message = true, rm.message
		if !held {
			p, e.sandbox, e.at = rm.pod, rm.pod.SandboxID, rm.at
		}
	}
	r.Namespace, r.Name, r.QOS, r.Cgroup, r.Static = p.Namespace, p.Name, p.QOS, p.Cgroup, p.Static
	r.Sandbox, r.At = e.sandbox, e.at
	return r, true
}

// stage writes the pod's record as persist does, staged
// (statestore.Store.Stage: tens of microseconds, no fsync): before the
// kill, so that an agent that dies right after it still finds the
// removal and the hold. The func it returns makes the record durable; it
// is called after the kill (the memory comes first).
func (a *Actor) stage(uid types.UID) (durable func()) {
	if a.cfg.State == nil {
		return func() {}
	}
	a.storeMu.Lock()
	defer a.storeMu.Unlock()
	a.mu.Lock()
	r, keep := a.recordLocked(uid)
	a.mu.Unlock()
	if !keep {
		return func() {}
	}
	sync, err := a.cfg.State.Stage(KindRemoval, string(uid), r)
	if err != nil {
		a.log.Warn("guard: the evicted pod's record not staged before the kill; written after it", "uid", uid, "err", err)
		return func() { a.persist(uid) }
	}
	a.mu.Lock()
	a.recorded[uid] = true
	a.mu.Unlock()
	return func() {
		if err := sync(); err != nil {
			a.log.Warn("guard: the evicted pod's record not made durable", "uid", uid, "err", err)
		}
	}
}

// RepairOOMScoreAdj puts back the oom_score_adj an agent that died left
// raised (oomadj.Raiser.Repair). It is called once at start after the
// first Sync (and the API server's listing, when there is one), before
// Run and before any eviction. A pod whose raise record could not be read
// gets the kubelet's value on its processes that still have the raised
// one (restoreLost).
func (a *Actor) RepairOOMScoreAdj() (oomadj.Repaired, error) {
	return a.raiser.Repair(nil, a.restoreLost)
}

// restoreLost is the fallback for a pod whose raise record could not be
// read: the kubelet's value from its API object (oomadj.Due, with
// MemoryCapacity), or, without one, from its QoS class where that alone
// decides (Guaranteed -997; BestEffort has the raised 1000 already). A
// Burstable pod without its API object is left, logged: its value
// depends on its containers' requests.
func (a *Actor) restoreLost(uid types.UID) error {
	p, ok := a.foundPod(uid)
	if !ok {
		a.log.Info("guard: a raise record could not be read; its pod is not on the node", "uid", uid)
		return nil
	}
	a.mu.Lock()
	api := a.apiPodLocked(uid)
	a.mu.Unlock()
	var due int
	switch {
	case api != nil && a.cfg.MemoryCapacity > 0:
		v, err := oomadj.Due(api, a.cfg.MemoryCapacity)
		if err != nil {
			return fmt.Errorf("restore oom_score_adj of %s/%s: %w", p.Namespace, p.Name, err)
		}
		due = v
	case p.QOS == corev1.PodQOSGuaranteed:
		due = qos.GuaranteedOOMScoreAdj
	case p.QOS == corev1.PodQOSBestEffort:
		return nil // the kubelet's value is the raised one
	default:
		a.log.Warn("guard: a raise record could not be read and the pod's containers' requests are not known: its processes keep the raised oom_score_adj",
			"pod", p.Namespace+"/"+p.Name, "uid", uid, "qos", p.QOS, "oom_score_adj", evictionapi.NextVictimOOMScoreAdj)
		return nil
	}
	d, err := a.cfg.Finder.Layout.Memory.Resolve(p.Cgroup)
	if err != nil {
		return fmt.Errorf("restore oom_score_adj of %s/%s: %w", p.Namespace, p.Name, err)
	}
	pids, err := cgroups.TreeProcs(d.Path)
	if err != nil {
		return fmt.Errorf("restore oom_score_adj of %s/%s: %w", p.Namespace, p.Name, err)
	}
	n, err := oomadj.Unraise(pids, evictionapi.NextVictimOOMScoreAdj, due)
	a.log.Warn("guard: a raise record could not be read; the pod's raised processes get the kubelet's value",
		"pod", p.Namespace+"/"+p.Name, "uid", uid, "oom_score_adj", due, "written", n)
	if err != nil {
		return fmt.Errorf("restore oom_score_adj of %s/%s: %w", p.Namespace, p.Name, err)
	}
	return nil
}
