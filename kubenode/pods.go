package kubenode

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
)

// Source is the pod source name of the pods the API server binds to the
// node.
const Source = "kube-apiserver"

// Pods is what the pod source drives: lifecycle.Manager.
type Pods interface {
	Apply(ctx context.Context, pods []*corev1.Pod, source string) ([]*corev1.Pod, error)
	List() []*corev1.Pod
	Forget(source string, keep map[types.UID]bool)
	Terminate(uid types.UID, grace time.Duration) bool
}

// PodsConfig configures the pod source and its status writer.
type PodsConfig struct {
	Client   kubernetes.Interface
	NodeName string
	// HostIPs are status.hostIP(s).
	HostIPs []string
	Pods    Pods
	// Reject says why Apply refused a pod, as the kubelet's admission
	// result: a reason (NodeAffinity, OutOfmemory, Evicted, ...) and a
	// message.
	Reject   func(error) (reason, message string)
	Recorder record.EventRecorder
	Log      *slog.Logger
	// StatusEvery is how often the status writer compares what the pods'
	// statuses are with what it wrote (0: 1 s); a change is written at
	// the next comparison.
	StatusEvery time.Duration
}

// PodSource takes the pods bound to the node from the API server (an
// informer on spec.nodeName: the Node authorizer lets a node list and
// watch only those), hands them to Pods, and writes their statuses back
// with the kubelet status manager's rules.
type PodSource struct {
	cfg    PodsConfig
	lister listerscorev1.PodLister
	kick   chan struct{}
	synced chan struct{}
	seen   atomic.Bool

	mu sync.Mutex
	// applied: UIDs handed to Pods; rejected: UIDs refused, with the
	// reason written; written: the status last written per UID;
	// deleted: UIDs whose API object was deleted by the writer.
	applied  map[types.UID]bool
	rejected map[types.UID]bool
	written  map[types.UID]*corev1.PodStatus
	final    map[types.UID]*corev1.Pod
	// node is the Node's UID once read (mirror pods' owner); mirrorErr
	// the last reason logged per static pod without a mirror.
	node      types.UID
	mirrorErr map[types.UID]string
}

// NewPodSource returns the source; Run starts it.
func NewPodSource(cfg PodsConfig) *PodSource {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.StatusEvery <= 0 {
		cfg.StatusEvery = time.Second
	}
	if cfg.Reject == nil {
		cfg.Reject = func(err error) (string, string) { return "UnexpectedAdmissionError", err.Error() }
	}
	return &PodSource{cfg: cfg, kick: make(chan struct{}, 1), synced: make(chan struct{}),
		applied: map[types.UID]bool{}, rejected: map[types.UID]bool{}, written: map[types.UID]*corev1.PodStatus{},
		final: map[types.UID]*corev1.Pod{}, mirrorErr: map[types.UID]string{}}
}

// Synced is closed once the pods bound to the node were listed and
// applied: until then a sandbox of one of them must not be taken for an
// orphan (lifecycle.Manager.SourcesReady waits for it).
func (s *PodSource) Synced() <-chan struct{} { return s.synced }

func (s *PodSource) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Run watches the node's pods and writes their statuses until ctx ends.
func (s *PodSource) Run(ctx context.Context) error {
	// One informer of the pods bound to this node, not a shared factory:
	// the factory links an informer and a lister for every API group,
	// megabytes of code the agent would map and never run.
	inf := coreinformers.NewFilteredPodInformer(s.cfg.Client, metav1.NamespaceAll, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
		func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", s.cfg.NodeName).String()
		})
	s.lister = listerscorev1.NewPodLister(inf.GetIndexer())
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.poke() },
		UpdateFunc: func(any, any) { s.poke() },
		DeleteFunc: func(any) { s.poke() },
	}); err != nil {
		return err
	}
	stopped := make(chan struct{})
	go func() { defer close(stopped); inf.RunWithContext(ctx) }()
	defer func() { <-stopped }()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil // ctx ended
	}
	s.sync(ctx)
	close(s.synced)
	t := time.NewTicker(s.cfg.StatusEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.kick:
			s.sync(ctx)
		case <-t.C:
			api, listed := s.sync(ctx)
			local := s.cfg.Pods.List()
			if listed {
				s.syncMirrors(ctx, api, local)
			}
			s.writeStatuses(ctx, local)
		}
	}
}

// sync hands new pods to Pods, terminates the deleted ones within their
// deletion grace period, and forgets those the API no longer has. It
// returns the node's pods as the informer has them, and whether it could
// list them.
// Mirror pods are not run: their static pods are.
func (s *PodSource) sync(ctx context.Context) ([]*corev1.Pod, bool) {
	all, err := s.lister.List(labels.Everything())
	if err != nil {
		s.cfg.Log.Warn("list the node's pods", "err", err)
		return nil, false
	}
	pods := slices.DeleteFunc(slices.Clone(all), isMirror)
	slices.SortFunc(pods, func(a, b *corev1.Pod) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	keep := make(map[types.UID]bool, len(pods))
	for _, p := range pods {
		s.mu.Lock()
		applied, rejected := s.applied[p.UID], s.rejected[p.UID]
		s.mu.Unlock()
		switch {
		case p.DeletionTimestamp != nil:
			keep[p.UID] = true
			grace := 30 * time.Second
			if p.DeletionGracePeriodSeconds != nil {
				grace = time.Duration(*p.DeletionGracePeriodSeconds) * time.Second
			}
			if !applied {
				// An agent that restarted meets the pod being deleted:
				// its containers may still run, and are stopped within
				// its grace period like any other's, not dropped.
				if _, err := s.cfg.Pods.Apply(ctx, []*corev1.Pod{p}, Source); err == nil {
					applied = true
					s.mu.Lock()
					s.applied[p.UID] = true
					s.mu.Unlock()
				}
			}
			s.mu.Lock()
			_, finalPending := s.final[p.UID]
			s.mu.Unlock()
			if finalPending {
				continue // its final status is written, then it is deleted (writeStatuses)
			}
			if !applied || !s.cfg.Pods.Terminate(p.UID, grace) {
				// Nothing of it runs here: it can go at once.
				s.deleteNow(ctx, p)
			}
			continue
		case applied:
			keep[p.UID] = true
			continue
		case rejected:
			continue
		case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
			// A terminal pod is never started again (an agent that
			// restarted sees its evicted pods).
			continue
		}
		if _, err := s.cfg.Pods.Apply(ctx, []*corev1.Pod{p}, Source); err != nil {
			s.reject(ctx, p, err)
			continue
		}
		keep[p.UID] = true
		s.mu.Lock()
		s.applied[p.UID] = true
		s.mu.Unlock()
	}
	if !s.seen.Swap(true) {
		s.cfg.Log.Info("pods bound to the node listed", "node", s.cfg.NodeName, "pods", len(pods))
	}
	s.cfg.Pods.Forget(Source, keep)
	s.mu.Lock()
	for uid := range s.applied {
		if !keep[uid] {
			delete(s.applied, uid)
		}
	}
	inAPI := make(map[types.UID]bool, len(all))
	for _, p := range all {
		inAPI[p.UID] = true
	}
	for uid := range s.rejected {
		if !inAPI[uid] {
			delete(s.rejected, uid)
		}
	}
	// Statuses written for objects the API no longer has (a mirror
	// deleted by the garbage collector, a pod force-deleted) are dropped.
	for uid := range s.written {
		if _, pending := s.final[uid]; !pending && !inAPI[uid] {
			delete(s.written, uid)
		}
	}
	s.mu.Unlock()
	return all, true
}

// reject ends a pod the node cannot run: Failed with the admission's
// reason and message, and a Warning event, as the kubelet's rejectPod.
func (s *PodSource) reject(ctx context.Context, p *corev1.Pod, err error) {
	reason, msg := s.cfg.Reject(err)
	s.cfg.Log.Warn("pod rejected", "pod", p.Namespace+"/"+p.Name, "reason", reason, "message", msg)
	if s.cfg.Recorder != nil {
		s.cfg.Recorder.Event(p, corev1.EventTypeWarning, reason, msg)
	}
	st := p.Status.DeepCopy()
	st.Phase, st.Reason, st.Message = corev1.PodFailed, reason, "Pod was rejected: "+msg
	if err := s.patchStatus(ctx, p, st); err != nil {
		s.cfg.Log.Warn("write the rejected pod's status", "pod", p.Namespace+"/"+p.Name, "err", err)
		return // tried again at the next sync
	}
	s.mu.Lock()
	s.rejected[p.UID] = true
	s.mu.Unlock()
}

// Removed is lifecycle's OnRemoved: the pod's containers are stopped and
// its sandbox and volumes gone. A pod deleted through the API gets its
// final status written, then is deleted with grace 0, as the kubelet's
// status manager does once a pod can be deleted.
func (s *PodSource) Removed(p *corev1.Pod) {
	if isStatic(p) {
		s.poke() // its mirror goes at the next sync
		return
	}
	if p.Annotations[annotationSource] != Source {
		return
	}
	s.mu.Lock()
	s.final[p.UID] = p
	s.mu.Unlock()
	s.poke()
}

// annotationSource is lifecycle.AnnotationSource (not imported: the
// lifecycle package is the caller's).
const annotationSource = "nodeguard.io/source"

// deleteNow deletes p with grace 0 and its UID as precondition: the
// object of another pod of the same name is never touched.
func (s *PodSource) deleteNow(ctx context.Context, p *corev1.Pod) {
	zero := int64(0)
	err := s.cfg.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &p.UID}})
	switch {
	case err == nil:
		s.cfg.Log.Info("pod deleted from the API server", "pod", p.Namespace+"/"+p.Name)
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
	default:
		s.cfg.Log.Warn("delete the pod from the API server", "pod", p.Namespace+"/"+p.Name, "err", err)
	}
}

// writeStatuses writes every pod's status that changed since it was last
// written, and the final statuses of removed pods followed by their
// deletion.
func (s *PodSource) writeStatuses(ctx context.Context, local []*corev1.Pod) {
	s.mu.Lock()
	finals := make([]*corev1.Pod, 0, len(s.final))
	for _, p := range s.final {
		finals = append(finals, p)
	}
	s.mu.Unlock()
	for _, f := range finals {
		api, err := s.lister.Pods(f.Namespace).Get(f.Name)
		if err != nil || api.UID != f.UID {
			s.forget(f.UID)
			continue
		}
		if err := s.patchStatus(ctx, api, s.merge(api, &f.Status)); err != nil {
			s.cfg.Log.Warn("write the final status", "pod", f.Namespace+"/"+f.Name, "err", err)
			continue
		}
		if api.DeletionTimestamp != nil {
			s.deleteNow(ctx, api)
		}
		s.forget(f.UID)
	}
	for _, p := range local {
		var api *corev1.Pod
		switch {
		case isStatic(p):
			m, ok := s.mirrorFor(p)
			if !ok {
				continue
			}
			api = m
		case p.Annotations[annotationSource] == Source:
			a, err := s.lister.Pods(p.Namespace).Get(p.Name)
			if err != nil || a.UID != p.UID {
				continue
			}
			api = a
		default:
			continue // the local API's pods are not the cluster's
		}
		if p.Status.Phase == corev1.PodPending && len(p.Status.ContainerStatuses) == 0 && api.Status.Phase == corev1.PodRunning {
			// Re-adopted after a restart and not synced yet: its initial
			// Pending status must not overwrite what the API has.
			continue
		}
		st := s.merge(api, &p.Status)
		s.mu.Lock()
		last := s.written[api.UID]
		s.mu.Unlock()
		if last != nil && apiequality.Semantic.DeepEqual(last, st) {
			continue
		}
		if apiequality.Semantic.DeepEqual(&api.Status, st) {
			s.mu.Lock()
			s.written[api.UID] = st
			s.mu.Unlock()
			continue
		}
		if err := s.patchStatus(ctx, api, st); err != nil {
			s.cfg.Log.Warn("write pod status", "pod", p.Namespace+"/"+p.Name, "err", err)
			continue
		}
		s.mu.Lock()
		s.written[api.UID] = st
		s.mu.Unlock()
	}
}

func (s *PodSource) forget(uid types.UID) {
	s.mu.Lock()
	delete(s.final, uid)
	delete(s.written, uid)
	s.mu.Unlock()
}

// kubeletConditions are the pod conditions the kubelet owns; the others
// (PodScheduled is the scheduler's, readiness gates are their
// controllers') are kept as the API has them. DisruptionTarget is the
// kubelet's only when it evicts: the taint manager and the eviction API
// set it too, and theirs is kept.
var kubeletConditions = []corev1.PodConditionType{
	corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady,
}

// ReasonReadinessGatesNotReady is the Ready condition's reason while a
// readiness gate's condition is missing or not True (the kubelet's).
const ReasonReadinessGatesNotReady = "ReadinessGatesNotReady"

// gatesUnready is the kubelet's message for the readiness gates whose
// conditions (set in the API by their controllers) are not True; "" when
// every gate is.
func gatesUnready(gates []corev1.PodReadinessGate, conds []corev1.PodCondition) string {
	var msgs []string
	for _, g := range gates {
		i := slices.IndexFunc(conds, func(c corev1.PodCondition) bool { return c.Type == g.ConditionType })
		switch {
		case i < 0:
			msgs = append(msgs, fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", string(g.ConditionType)))
		case conds[i].Status != corev1.ConditionTrue:
			msgs = append(msgs, fmt.Sprintf("the status of pod readiness gate %q is not \"True\", but %v", string(g.ConditionType), conds[i].Status))
		}
	}
	return strings.Join(msgs, ", ")
}

func terminal(p corev1.PodPhase) bool { return p == corev1.PodSucceeded || p == corev1.PodFailed }

// running reports whether any container of st still runs.
func running(st *corev1.PodStatus) bool {
	for _, list := range [][]corev1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses} {
		for i := range list {
			if list[i].State.Running != nil {
				return true
			}
		}
	}
	return false
}

// merge is the status to write for a pod whose API object is api and
// whose status on the node is cur, by the kubelet status manager's rules:
// a terminal phase is never left, and not entered while a container
// still runs (an evicted pod's containers stop within its grace period;
// the ReplicaSet sees Failed once they have); a pod in a terminal phase
// is not Ready; the kubelet's own conditions are replaced, keeping their
// transition times while their status holds; startTime is kept once set;
// an evicted pod gets DisruptionTarget at once.
func (s *PodSource) merge(api *corev1.Pod, cur *corev1.PodStatus) *corev1.PodStatus {
	st := cur.DeepCopy()
	now := metav1.Now()
	old := api.Status
	if terminal(old.Phase) && st.Phase != old.Phase {
		st.Phase, st.Reason, st.Message = old.Phase, old.Reason, old.Message
	}
	evicted := st.Phase == corev1.PodFailed && st.Reason == "Evicted"
	evictMsg := st.Message
	if !terminal(old.Phase) && terminal(st.Phase) && running(st) {
		// As the status manager's mergePodStatus: the phase the API has
		// stays until no container runs.
		st.Phase, st.Reason, st.Message = old.Phase, old.Reason, old.Message
		if st.Phase == "" {
			st.Phase = corev1.PodPending
		}
	}
	if terminal(st.Phase) {
		for i := range st.Conditions {
			if c := &st.Conditions[i]; (c.Type == corev1.PodReady || c.Type == corev1.ContainersReady) && c.Status == corev1.ConditionTrue {
				c.Status, c.Reason, c.Message = corev1.ConditionFalse, "PodCompleted", ""
				if st.Phase == corev1.PodFailed {
					c.Reason = "PodFailed"
				}
			}
		}
	}
	if old.StartTime != nil {
		st.StartTime = old.StartTime.DeepCopy()
	}
	if st.StartTime != nil {
		st.StartTime = &metav1.Time{Time: st.StartTime.Truncate(time.Second)}
	}
	if len(s.cfg.HostIPs) > 0 {
		st.HostIP = s.cfg.HostIPs[0]
		st.HostIPs = nil
		for _, ip := range s.cfg.HostIPs {
			st.HostIPs = append(st.HostIPs, corev1.HostIP{IP: ip})
		}
	}
	var conds []corev1.PodCondition
	if evicted {
		target := corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
			Reason: "TerminationByKubelet", Message: evictMsg, LastTransitionTime: metav1.NewTime(now.Truncate(time.Second))}
		for _, o := range old.Conditions {
			if o.Type == target.Type && o.Status == target.Status && o.Reason == target.Reason {
				target.LastTransitionTime = o.LastTransitionTime
			}
		}
		conds = append(conds, target)
	}
	for _, c := range old.Conditions {
		if !slices.Contains(kubeletConditions, c.Type) && !(evicted && c.Type == corev1.DisruptionTarget) {
			conds = append(conds, c)
		}
	}
	for _, c := range st.Conditions {
		if !slices.Contains(kubeletConditions, c.Type) {
			if !slices.ContainsFunc(conds, func(o corev1.PodCondition) bool { return o.Type == c.Type }) {
				conds = append(conds, c) // PodScheduled before the scheduler's is seen (static pods)
			}
			continue
		}
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			if msg := gatesUnready(api.Spec.ReadinessGates, old.Conditions); msg != "" {
				c.Status, c.Reason, c.Message = corev1.ConditionFalse, ReasonReadinessGatesNotReady, msg
			}
		}
		c.LastTransitionTime = metav1.NewTime(now.Truncate(time.Second))
		for _, o := range old.Conditions {
			if o.Type == c.Type && o.Status == c.Status {
				c.LastTransitionTime = o.LastTransitionTime
			}
		}
		conds = append(conds, c)
	}
	st.Conditions = conds
	// Times are written in seconds: compared with what comes back, a
	// finer one would make every comparison a change.
	for _, list := range [][]corev1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses} {
		for i := range list {
			truncateState(&list[i].State)
			truncateState(&list[i].LastTerminationState)
		}
	}
	return st
}

func truncateState(s *corev1.ContainerState) {
	tr := func(t *metav1.Time) {
		if !t.IsZero() {
			*t = metav1.NewTime(t.Truncate(time.Second))
		}
	}
	if s.Running != nil {
		tr(&s.Running.StartedAt)
	}
	if s.Terminated != nil {
		tr(&s.Terminated.StartedAt)
		tr(&s.Terminated.FinishedAt)
	}
}

// patchStatus writes st as p's status: a strategic merge patch from the
// status the API has, with p's UID in it, so that the patch fails rather
// than change another pod of the same name (the kubelet's PatchPodStatus).
func (s *PodSource) patchStatus(ctx context.Context, p *corev1.Pod, st *corev1.PodStatus) error {
	oldJSON, err := json.Marshal(corev1.Pod{Status: p.Status})
	if err != nil {
		return err
	}
	newJSON, err := json.Marshal(corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: p.UID}, Status: *st})
	if err != nil {
		return err
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, corev1.Pod{})
	if err != nil {
		return fmt.Errorf("status patch: %w", err)
	}
	_, err = s.cfg.Client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("patch status of %s/%s: %w", p.Namespace, p.Name, err)
	}
	return nil
}
