package guard

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeguard/nodeguard/metrics"
)

// uidIndex indexes the API's pods by UID: the runtime names pods by it.
const uidIndex = "uid"

// StartAPI starts the informer of the API server's pods of the node (Run
// does), until ctx ends; without an API server it does nothing.
func (a *Actor) StartAPI(ctx context.Context) error {
	c := a.cfg.Client
	if c == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pods != nil {
		return nil // started already
	}
	f := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", a.cfg.NodeName).String()
	}))
	inf := f.Core().V1().Pods().Informer()
	if err := inf.AddIndexers(cache.Indexers{uidIndex: func(obj any) ([]string, error) {
		if p, ok := obj.(*corev1.Pod); ok {
			return []string{string(p.UID)}, nil
		}
		return nil, nil
	}}); err != nil {
		return fmt.Errorf("guard: pod informer: %w", err)
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { a.Refresh() }}); err != nil {
		return fmt.Errorf("guard: pod informer: %w", err)
	}
	a.pods = inf.GetIndexer()
	f.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		f.Shutdown()
	}()
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			a.synced.Store(true)
			a.log.Info("guard: the API server's pods of the node are listed", "node", a.cfg.NodeName)
			a.Refresh()
		}
	}()
	return nil
}

// WaitAPI starts the informer and waits, at most timeout, until it has
// listed the node's pods.
func (a *Actor) WaitAPI(ctx context.Context, timeout time.Duration) error {
	if err := a.StartAPI(ctx); err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for !a.synced.Load() {
		if time.Now().After(deadline) {
			return fmt.Errorf("guard: the API server's pods of node %s not listed within %s", a.cfg.NodeName, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// Listed reports whether the API server's pods include uid.
func (a *Actor) Listed(uid types.UID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.apiPodLocked(uid) != nil
}

// Refresh asks Run to find the pods again now.
func (a *Actor) Refresh() {
	select {
	case a.refresh <- struct{}{}:
	default:
	}
}

// Sync finds the pods now (Run does, every Refresh): the runtime's ready
// sandboxes of the kubelet with their cgroups.
func (a *Actor) Sync(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	found, err := a.cfg.Finder.Pods(cctx)
	cancel()
	if err != nil {
		return err
	}
	a.found.Store(&found)
	for _, uid := range a.syncFound(found) {
		a.persist(uid)
	}
	return nil
}

// syncFound updates what the actor keeps of the pods to those found, and
// returns the pods whose record may be removed now (persist decides).
func (a *Actor) syncFound(found []Pod) (done []types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	seen := make(map[types.UID]bool, len(found))
	byID := make(map[uint64]metrics.PodLabels, len(found))
	for _, p := range found {
		seen[p.UID] = true
		c, err := a.podCgroupLocked(p)
		if err != nil || c.id == 0 {
			continue
		}
		byID[c.id] = metrics.PodLabels{Namespace: p.Namespace, Pod: p.Name, UID: string(p.UID), QOS: string(p.QOS)}
	}
	a.byID = byID
	for uid, c := range a.cgs {
		if !seen[uid] {
			c.close()
			delete(a.cgs, uid)
		}
	}
	for uid := range a.evicted {
		if !seen[uid] {
			delete(a.evicted, uid)
			a.raiser.Forget(uid)
		}
	}
	for k := range a.retryAt {
		if !seen[k.uid] && a.pending[k.uid] == nil {
			delete(a.retryAt, k)
		}
	}
	if a.pods != nil && a.synced.Load() {
		var missing []string
		for _, p := range found {
			if !p.Static && a.apiPodLocked(p.UID) == nil {
				missing = append(missing, p.Namespace+"/"+p.Name)
			}
		}
		if len(missing) != a.unlisted {
			a.unlisted = len(missing)
			if len(missing) > 0 {
				a.log.Warn("guard: pods on the node that the API server does not list for this node: not evicted until it does (is nodeName the kubelet's?)",
					"node", a.cfg.NodeName, "pods", missing)
			}
		}
	}
	for uid := range a.recorded {
		if !a.keepRecordLocked(uid) {
			done = append(done, uid)
		}
	}
	return done
}

// apiPodLocked is the API server's pod of that UID, nil when there is no
// API server or the pod is not (yet) listed.
func (a *Actor) apiPodLocked(uid types.UID) *corev1.Pod {
	if a.pods == nil {
		return nil
	}
	objs, err := a.pods.ByIndex(uidIndex, string(uid))
	if err != nil || len(objs) == 0 {
		return nil
	}
	p, _ := objs[0].(*corev1.Pod)
	return p
}
