package guard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/evictionapi"
)

type retry struct {
	at      time.Time
	backoff time.Duration
}

// retryKey keeps the back-offs of a pod's soft evictions and of its hard
// eviction's removal apart: a budget's refusal of the first does not
// delay the second.
type retryKey struct {
	uid  types.UID
	hard bool
}

type evictedPod struct {
	pod     Pod
	sandbox string
	at      time.Time
}

// removal is a hard eviction's API call still to make.
type removal struct {
	pod     Pod
	message string
	at      time.Time
}

// evictedHold is how long a pod this actor evicted stays out of Pods while
// the sandbox it was evicted in is still found: the kubelet's tear-down of
// a deleted pod takes a few seconds, during which its sandbox may still
// be ready. A new sandbox of the pod (the kubelet restarted it: its
// removal refused, or not made yet) is a pod like any other at once, and
// may be killed again; so is one still found after the hold.
const evictedHold = 30 * time.Second

// Evict carries out a decision on one of the kubelet's pods.
//
// Hard: the pod cgroup is killed (cgroup.kill, or SIGKILL over its
// processes), which releases its memory before any API call; then the
// pod is removed through the API (HardAction), in the background and
// retried until the API server takes it, so that an unreachable API
// server delays only the bookkeeping. Where the kubelet is already
// stopping the pod (deleted or terminal in the API), only the kill is
// added: the kubelet's status stands.
//
// Soft: one Eviction API call with the pod's grace period; a
// PodDisruptionBudget's refusal is counted and returned
// (ErrDisruptionBudget), and the pod is Refused in Pods until the
// back-off lets it be asked again: never bypassed. Where the kubelet is
// already stopping the pod, nothing is done: its memory is on its way.
//
// Disk and pid decisions are refused: those evictions are the kubelet's.
func (a *Actor) Evict(ctx context.Context, d evictionapi.Decision) error {
	uid := d.Victim.UID
	if d.Resource == evictionapi.ResourceDisk || d.Resource == evictionapi.ResourcePID {
		return fmt.Errorf("evict %s/%s: %w: guard mode leaves %s evictions to the kubelet", d.Victim.Namespace, d.Victim.Name, evictionapi.ErrEvictionRefused, d.Resource)
	}
	p, ok := a.foundPod(uid)
	if !ok {
		return fmt.Errorf("evict %s/%s: %w", d.Victim.Namespace, d.Victim.Name, ErrNotFound)
	}
	a.mu.Lock()
	kubelet := stopping(a.apiPodLocked(uid))
	a.mu.Unlock()
	if kubelet {
		a.kubeletEvicting.Add(1)
	}
	if d.Hard {
		start := time.Now()
		// The hold and the removal are recorded before the kill, staged
		// (no fsync: an agent that dies after the kill finds them), and
		// made durable after it: the memory comes first.
		a.mu.Lock()
		prevHeld, held := a.evicted[uid]
		prevPending := a.pending[uid]
		a.evicted[uid] = evictedPod{pod: p, sandbox: p.SandboxID, at: start}
		if !kubelet && a.cfg.Client != nil {
			a.pending[uid] = &removal{pod: p, message: d.Message, at: start}
		}
		a.mu.Unlock()
		durable := a.stage(uid)
		if err := a.kill(p); err != nil {
			// Nothing was killed: the actor and its record as they were.
			a.mu.Lock()
			if held {
				a.evicted[uid] = prevHeld
			} else {
				delete(a.evicted, uid)
			}
			if prevPending != nil {
				a.pending[uid] = prevPending
			} else {
				delete(a.pending, uid)
			}
			a.mu.Unlock()
			a.persist(uid)
			return fmt.Errorf("evict %s/%s: %w", p.Namespace, p.Name, err)
		}
		a.killed.Add(1)
		durable()
		a.log.Info("guard: pod cgroup killed", "pod", p.Namespace+"/"+p.Name, "uid", uid, "cgroup", p.Cgroup,
			"kill", time.Since(start), "kubelet_stopping", kubelet, "api", a.cfg.Client != nil)
		if !kubelet {
			a.event(p, d.Message)
		}
		a.kickAPI()
		return nil
	}
	if kubelet {
		a.log.Info("guard: the kubelet is already stopping the pod: left to it", "pod", p.Namespace+"/"+p.Name, "uid", uid)
		return nil
	}
	if a.cfg.Client == nil {
		return fmt.Errorf("evict %s/%s: %w", p.Namespace, p.Name, ErrNoAPIServer)
	}
	key := retryKey{uid, false}
	if err := a.due(key); err != nil {
		return fmt.Errorf("evict %s/%s: %w", p.Namespace, p.Name, err)
	}
	grace := int64(d.GracePeriod / time.Second)
	if err := a.evictAPI(ctx, p, &grace, key); err != nil {
		return fmt.Errorf("evict %s/%s: %w", p.Namespace, p.Name, err)
	}
	a.mu.Lock()
	a.evicted[uid] = evictedPod{pod: p, sandbox: p.SandboxID, at: time.Now()}
	a.mu.Unlock()
	a.persist(uid)
	a.log.Info("guard: pod evicted through the Eviction API", "pod", p.Namespace+"/"+p.Name, "uid", uid, "grace", d.GracePeriod)
	a.event(p, d.Message)
	return nil
}

// kill kills the pod's cgroup; ErrNotFound when it is gone (a kill of a
// directory that no longer exists reaches nobody, and says so).
func (a *Actor) kill(p Pod) error {
	layout := a.cfg.Finder.Layout
	d, err := layout.Memory.Resolve(p.Cgroup)
	if err != nil {
		return err
	}
	if _, err := os.Stat(d.Path); errors.Is(err, fs.ErrNotExist) {
		return ErrNotFound
	}
	if _, err := kubepods.KillPod(layout, p.Cgroup); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return ErrNotFound
		}
		return err
	}
	return nil
}

// due returns an error wrapping evictionapi.ErrEvictionRefused while the last
// failed or refused API call's back-off runs.
func (a *Actor) due(k retryKey) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r, ok := a.retryAt[k]; ok && time.Now().Before(r.at) {
		return fmt.Errorf("%w: the last API call failed or was refused; asked again after %s", evictionapi.ErrEvictionRefused, r.at.Format(time.RFC3339Nano))
	}
	return nil
}

// failed records a failed or refused API call: the next one waits the
// back-off, doubled each time up to RetryMax.
func (a *Actor) failed(k retryKey) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	b := a.cfg.RetryInitial
	if r, ok := a.retryAt[k]; ok {
		b = min(2*r.backoff, a.cfg.RetryMax)
	}
	a.retryAt[k] = retry{at: time.Now().Add(b), backoff: b}
	return b
}

func (a *Actor) succeeded(k retryKey) {
	a.mu.Lock()
	delete(a.retryAt, k)
	a.mu.Unlock()
}

// gone reports whether the pod p named is no longer in the API server, or
// is another pod of that name now: what a failed UID precondition (a
// Conflict) may mean, or only that an update raced (the Eviction API's
// own retries of the budget's status end in a Conflict too).
func (a *Actor) gone(ctx context.Context, p Pod) bool {
	cur, err := a.cfg.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	return apierrors.IsNotFound(err) || (err == nil && cur.UID != p.UID)
}

// evictAPI asks the Eviction API to evict p with the grace period (the
// UID a precondition: a pod of the same name made since is not touched).
// Gone already is success. The answers, as the API server gives them:
// 429 with the DisruptionBudget cause is a budget's refusal (429 without
// it is the server's own throttling: a failed call); 500 "more than one
// PodDisruptionBudget" is a refusal that will not change by itself.
func (a *Actor) evictAPI(ctx context.Context, p Pod, grace *int64, k retryKey) error {
	uid := p.UID
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: grace, Preconditions: &metav1.Preconditions{UID: &uid}}}
	err := a.cfg.Client.PolicyV1().Evictions(p.Namespace).Evict(ctx, ev)
	switch {
	case err == nil, apierrors.IsNotFound(err), apierrors.IsConflict(err) && a.gone(ctx, p):
		a.evictions.Add(1)
		a.succeeded(k)
		return nil
	case apierrors.IsTooManyRequests(err) && apierrors.HasStatusCause(err, policyv1.DisruptionBudgetCause),
		apierrors.IsInternalError(err) && strings.Contains(err.Error(), "more than one PodDisruptionBudget"):
		a.refused.Add(1)
		b := a.failed(k)
		a.log.Warn("guard: eviction refused by a PodDisruptionBudget; asked again later, never bypassed",
			"pod", p.Namespace+"/"+p.Name, "uid", uid, "retry_in", b, "err", err)
		return fmt.Errorf("%w: %v", ErrDisruptionBudget, err)
	default:
		a.apiErrors.Add(1)
		b := a.failed(k)
		return fmt.Errorf("%w: eviction API: %w (asked again in %s)", evictionapi.ErrEvictionRefused, err, b)
	}
}

// kickAPI wakes the API loop.
func (a *Actor) kickAPI() {
	select {
	case a.wakeAPI <- struct{}{}:
	default:
	}
}

// runAPI makes the hard evictions' API calls as they come and as their
// back-off ends, until ctx ends.
func (a *Actor) runAPI(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		next := a.removePending(ctx)
		if !next.IsZero() {
			t.Reset(max(time.Until(next), time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return
		case <-a.wakeAPI:
		case <-t.C:
		}
	}
}

// removePending makes the API call of every pending hard eviction whose
// back-off is over, and returns when the next one is due (zero: none).
func (a *Actor) removePending(ctx context.Context) time.Time {
	if a.cfg.Client == nil {
		// Removals resumed from the store of an agent that had an API
		// server: kept, for one that has.
		return time.Time{}
	}
	a.mu.Lock()
	var due []*removal
	var next time.Time
	now := time.Now()
	for uid, r := range a.pending {
		if rt, ok := a.retryAt[retryKey{uid, true}]; ok && now.Before(rt.at) {
			if next.IsZero() || rt.at.Before(next) {
				next = rt.at
			}
			continue
		}
		due = append(due, r)
	}
	a.mu.Unlock()
	for _, r := range due {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := a.remove(cctx, r)
		cancel()
		if ctx.Err() != nil {
			return time.Time{}
		}
		a.mu.Lock()
		if err == nil {
			delete(a.pending, r.pod.UID)
		} else if rt, ok := a.retryAt[retryKey{r.pod.UID, true}]; ok && (next.IsZero() || rt.at.Before(next)) {
			next = rt.at
		}
		a.mu.Unlock()
		if err == nil {
			a.persist(r.pod.UID)
		}
	}
	return next
}

// remove is a hard eviction's API call: HardDelete's status and delete,
// or HardEvict's Eviction API call with grace 0. The pod cgroup is killed
// again first: a removal that waited for the API server may find the
// pod's containers restarted by the kubelet meanwhile, and the pod must
// not be marked Failed and deleted while they run.
func (a *Actor) remove(ctx context.Context, r *removal) error {
	p := r.pod
	if cur, ok := a.foundPod(p.UID); ok {
		if err := a.kill(cur); err != nil && !errors.Is(err, ErrNotFound) {
			a.log.Warn("guard: kill the evicted pod again before its removal", "pod", p.Namespace+"/"+p.Name, "err", err)
		}
	}
	var err error
	if a.cfg.HardAction == HardEvict {
		zero := int64(0)
		err = a.evictAPI(ctx, p, &zero, retryKey{p.UID, true})
	} else {
		err = a.deleteEvicted(ctx, p, r.message)
	}
	if err != nil {
		a.log.Warn("guard: remove the evicted pod through the API server; retried", "pod", p.Namespace+"/"+p.Name,
			"uid", p.UID, "action", a.cfg.HardAction, "since_kill", time.Since(r.at), "err", err)
		return err
	}
	a.log.Info("guard: evicted pod removed through the API server", "pod", p.Namespace+"/"+p.Name, "uid", p.UID,
		"action", a.cfg.HardAction, "since_kill", time.Since(r.at))
	return nil
}

// deleteEvicted writes the kubelet's Evicted status on the pod and
// deletes it at once (grace 0, the UID a precondition). The API server
// deletes a terminal pod at once whatever the grace period.
func (a *Actor) deleteEvicted(ctx context.Context, p Pod, message string) error {
	k := retryKey{p.UID, true}
	pods := a.cfg.Client.CoreV1().Pods(p.Namespace)
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	status := corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: message,
		Conditions: []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
			Reason: "TerminationByKubelet", Message: message, LastTransitionTime: now}}}
	patch, err := statusPatch(p.UID, status)
	if err != nil {
		return err
	}
	_, err = pods.Patch(ctx, p.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err) && a.gone(ctx, p):
		a.succeeded(k)
		return nil // gone, or another pod of that name now
	case err != nil && !apierrors.IsInvalid(err):
		// (Invalid: the pod is terminal already; deleting it is what
		// is left.)
		a.apiErrors.Add(1)
		a.failed(k)
		return fmt.Errorf("status: %w", err)
	}
	uid := p.UID
	zero := int64(0)
	err = pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !(apierrors.IsConflict(err) && a.gone(ctx, p)) {
		a.apiErrors.Add(1)
		a.failed(k)
		return fmt.Errorf("delete: %w", err)
	}
	a.deletes.Add(1)
	a.succeeded(k)
	return nil
}

// event posts the kubelet's Evicted event on the pod.
func (a *Actor) event(p Pod, message string) {
	if a.cfg.Recorder == nil {
		return
	}
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name, UID: p.UID}
	a.cfg.Recorder.Event(ref, corev1.EventTypeWarning, "Evicted", message)
}

// statusPatch is a strategic merge patch of the pod's status that carries
// its UID, as the kubelet's status patches do: the API server refuses it
// (Conflict) when the pod of that name is another one now.
func statusPatch(uid types.UID, st corev1.PodStatus) ([]byte, error) {
	return json.Marshal(map[string]any{"metadata": map[string]any{"uid": uid}, "status": st})
}
