package guard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/evictionapi"
	"github.com/nodeguard/nodeguard/internal/statestore"
	"github.com/nodeguard/nodeguard/metrics"
	"github.com/nodeguard/nodeguard/oomadj"
	"github.com/nodeguard/nodeguard/pressure"
	"github.com/nodeguard/nodeguard/qos"
)

// HardAction is how a hard eviction removes the pod through the API
// server once its processes are killed.
type HardAction string

const (
	// HardDelete writes the kubelet's Evicted status (phase Failed,
	// reason Evicted, the DisruptionTarget condition) and deletes the
	// pod at once: its controller replaces it elsewhere without waiting
	// for anyone's consent. A hard threshold means the node is about to
	// OOM: the pod's processes are already dead, and a budget cannot
	// bring them back.
	HardDelete HardAction = "delete"
	// HardEvict asks the Eviction API (grace 0), which a
	// PodDisruptionBudget may refuse: the processes are killed all the
	// same, the refusal is counted and the call retried, never bypassed.
	// Meanwhile the kubelet restarts the pod's containers on the node.
	HardEvict HardAction = "evict"
)

// ParseHardAction parses eviction.hardAction ("" is HardDelete).
func ParseHardAction(s string) (HardAction, error) {
	switch HardAction(s) {
	case "", HardDelete:
		return HardDelete, nil
	case HardEvict:
		return HardEvict, nil
	}
	return "", fmt.Errorf("hard action %q: want %q or %q", s, HardDelete, HardEvict)
}

var (
	// ErrNotFound: the pod is not one of the kubelet's running pods on
	// the node (any more).
	ErrNotFound = errors.New("pod not found on the node")
	// ErrDisruptionBudget wraps evictionapi.ErrEvictionRefused: the Eviction API
	// refused for a PodDisruptionBudget.
	ErrDisruptionBudget = fmt.Errorf("%w: a PodDisruptionBudget forbids it now", evictionapi.ErrEvictionRefused)
	// ErrNoAPIServer wraps evictionapi.ErrEvictionRefused: a soft eviction is only
	// ever asked of the Eviction API, and there is none.
	ErrNoAPIServer = fmt.Errorf("%w: soft evictions go through the Eviction API, and guard mode has no API server", evictionapi.ErrEvictionRefused)
)

// Config configures an Actor.
type Config struct {
	Finder *Finder
	// Client is the API server; nil: none, and the actor acts through
	// cgroups only (hard evictions kill, soft ones are refused).
	Client kubernetes.Interface
	// NodeName is the node's name in the API (the pods' spec.nodeName).
	NodeName string
	// Recorder posts the kubelet's Evicted event; nil: none.
	Recorder record.EventRecorder
	// Exempt pods ("namespace/name") are never evicted.
	Exempt     []string
	HardAction HardAction
	// Refresh is how often the pods are found anew (default 2 s; also
	// at once when the API server adds a pod of the node).
	Refresh time.Duration
	// RetryInitial and RetryMax bound the back-off of API calls that
	// failed or were refused (defaults 500 ms and 30 s).
	RetryInitial, RetryMax time.Duration
	// State is the agent's state store: the evicted pods' holds and
	// pending removals (KindRemoval) and the oom_score_adj raise records
	// are kept there, and New resumes them. nil: in memory only.
	State *statestore.Store
	// MemoryCapacity is the node's memory in bytes, for the kubelet's
	// oom_score_adj of a Burstable pod whose raise record was lost
	// (RepairOOMScoreAdj); 0: unknown.
	MemoryCapacity int64
	Log            *slog.Logger
}

// Counts are what the actor did, for the metrics.
type Counts struct {
	// Killed: pod cgroups killed for hard evictions.
	Killed uint64
	// Evictions and Deletes are the API calls that succeeded, by kind.
	Evictions, Deletes uint64
	// Refused: Eviction API calls a PodDisruptionBudget refused.
	Refused uint64
	// APIErrors: API calls that failed otherwise (unreachable, ...).
	APIErrors uint64
	// KubeletEvicting: decisions left to the kubelet, whose own
	// eviction of the pod was under way.
	KubeletEvicting uint64
	// Pending: hard evictions whose API call is still to succeed.
	Pending int
}

// Actor is evictionapi.Actor for guard mode: the kubelet's pods, found on the
// node, acted on through their cgroups and the API server.
type Actor struct {
	cfg    Config
	log    *slog.Logger
	exempt map[string]bool
	pods   cache.Indexer // the API's pods of the node; nil without a client

	found   atomic.Pointer[[]Pod]
	refresh chan struct{}
	synced  atomic.Bool

	mu sync.Mutex
	// cgs: per pod, its cgroup as last found (id, task counter, limit).
	cgs map[types.UID]*podCgroup
	// byID labels the pods' cgroups for the metrics.
	byID map[uint64]metrics.PodLabels
	// evicted: pods this actor evicted, by UID: the sandbox it found them
	// in, left out of Pods while that sandbox is found (evictedHold).
	evicted map[types.UID]evictedPod
	// retryAt: per pod and kind of call (soft or hard), when an API call
	// that failed or was refused may be made again, and the back-off that
	// got there.
	retryAt map[retryKey]retry
	// unlisted: the pods found on the node that the API server does not
	// list, as last logged.
	unlisted int
	// pending: hard evictions whose API call is still to succeed.
	pending map[types.UID]*removal
	wakeAPI chan struct{}
	// recorded: the pods with a KindRemoval record in the store.
	recorded map[types.UID]bool
	// storeMu orders the writes of the records (persist).
	storeMu sync.Mutex

	raiser *oomadj.Raiser

	killed, evictions, deletes, refused, apiErrors, kubeletEvicting atomic.Uint64
}

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

// podCgroup is a pod cgroup as the actor last found it.
type podCgroup struct {
	name  string
	rel   string
	id    uint64
	tasks *cgroups.TaskCounter
	// limit is its memory limit (0: none): a Guaranteed pod's memory
	// request without an API server.
	limit int64
}

var _ evictionapi.Actor = (*Actor)(nil)

// New returns an actor; Run drives it.
func New(cfg Config) (*Actor, error) {
	if cfg.Finder == nil || cfg.Finder.Layout == nil {
		return nil, errors.New("guard: a finder with a cgroup layout is required")
	}
	if cfg.Client != nil && cfg.NodeName == "" {
		return nil, errors.New("guard: the node's name is required with an API server")
	}
	if _, err := ParseHardAction(string(cfg.HardAction)); err != nil {
		return nil, err
	}
	if cfg.HardAction == "" {
		cfg.HardAction = HardDelete
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = 2 * time.Second
	}
	if cfg.RetryInitial <= 0 {
		cfg.RetryInitial = 500 * time.Millisecond
	}
	if cfg.RetryMax <= 0 {
		cfg.RetryMax = 30 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	a := &Actor{cfg: cfg, log: cfg.Log, exempt: map[string]bool{}, refresh: make(chan struct{}, 1),
		cgs: map[types.UID]*podCgroup{}, byID: map[uint64]metrics.PodLabels{}, evicted: map[types.UID]evictedPod{},
		retryAt: map[retryKey]retry{}, pending: map[types.UID]*removal{}, wakeAPI: make(chan struct{}, 1),
		recorded: map[types.UID]bool{}, raiser: oomadj.NewRaiser(cfg.State, cfg.Log)}
	for _, e := range cfg.Exempt {
		a.exempt[e] = true
	}
	a.resume()
	if cfg.State != nil {
		cfg.State.Prepare(KindRemoval) // the first kill's record, staged through it
	}
	return a, nil
}

// evictedHold is how long a pod this actor evicted stays out of Pods while
// the sandbox it was evicted in is still found: the kubelet's tear-down of
// a deleted pod takes a few seconds, during which its sandbox may still
// be ready. A new sandbox of the pod (the kubelet restarted it: its
// removal refused, or not made yet) is a pod like any other at once, and
// may be killed again; so is one still found after the hold.
const evictedHold = 30 * time.Second

// Found returns the pods found by the last Sync.
func (a *Actor) Found() []Pod {
	if fp := a.found.Load(); fp != nil {
		return *fp
	}
	return nil
}

// uidIndex indexes the API's pods by UID: the runtime names pods by it.
const uidIndex = "uid"

// Run finds the pods until ctx ends: the runtime's and the cgroups' every
// Refresh, the API server's pods of the node through an informer, and
// makes the hard evictions' API calls that are due.
func (a *Actor) Run(ctx context.Context) error {
	if err := a.StartAPI(ctx); err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.runAPI(ctx)
	}()
	defer wg.Wait()
	t := time.NewTicker(a.cfg.Refresh)
	defer t.Stop()
	for {
		if err := a.Sync(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn("guard: find the kubelet's pods", "err", err)
		}
		select {
		case <-ctx.Done():
			a.close()
			return nil
		case <-t.C:
		case <-a.refresh:
		}
	}
}

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

func (a *Actor) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for uid, c := range a.cgs {
		c.close()
		delete(a.cgs, uid)
	}
}

func (c *podCgroup) close() {
	if c.tasks != nil {
		_ = c.tasks.Close()
	}
}

// podCgroupLocked returns the pod's cgroup as last found, or finds it:
// anew when its name changed or its task counter says it was removed.
func (a *Actor) podCgroupLocked(p Pod) (*podCgroup, error) {
	if c := a.cgs[p.UID]; c != nil && c.name == p.Cgroup {
		if c.tasks == nil {
			// Opening it failed last time: again.
			c.tasks, _ = kubepods.OpenPodTaskCounter(a.cfg.Finder.Layout, p.Cgroup)
		}
		return c, nil
	}
	if c := a.cgs[p.UID]; c != nil {
		c.close()
		delete(a.cgs, p.UID)
	}
	layout := a.cfg.Finder.Layout
	d, err := layout.Memory.Resolve(p.Cgroup)
	if err != nil {
		return nil, err
	}
	c := &podCgroup{name: p.Cgroup, rel: d.Rel}
	if c.id, err = cgroups.ID(d.Path); err != nil {
		return nil, err
	}
	c.limit = memoryLimit(d.Path, layout.Memory.V2())
	if c.tasks, err = kubepods.OpenPodTaskCounter(layout, p.Cgroup); err != nil {
		c.tasks = nil // counted as unknown; opened again next time
	}
	a.cgs[p.UID] = c
	return c, nil
}

// memoryLimit reads the cgroup's memory limit: 0 when it has none (max,
// or v1's huge number) or it cannot be read.
func memoryLimit(dir string, v2 bool) int64 {
	file := "memory.limit_in_bytes"
	if v2 {
		file = "memory.max"
	}
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return 0
	}
	s := strings.TrimSpace(string(b))
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v >= 1<<62 {
		return 0
	}
	return v
}

// Pods lists the kubelet's running pods for the policy: those found in
// the runtime with a cgroup, less the ones this actor evicted (while the
// sandbox it evicted them in is found). Pods the kubelet is stopping
// (deleted or terminal in the API) are listed: they hold memory until
// they are gone, and a decision on one leaves it to the kubelet (Evict).
// A pod whose soft eviction was refused is Refused while its back-off
// runs. calm leaves the task counts unread.
func (a *Actor) Pods(calm bool) []evictionapi.PodRef {
	fp := a.found.Load()
	if fp == nil {
		return nil
	}
	found := *fp
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]evictionapi.PodRef, 0, len(found))
	for _, p := range found {
		if e, ok := a.evicted[p.UID]; ok && e.sandbox == p.SandboxID && time.Since(e.at) < evictedHold {
			continue
		}
		api := a.apiPodLocked(p.UID)
		c, err := a.podCgroupLocked(p)
		if err != nil {
			continue // gone since it was found
		}
		ref := evictionapi.PodRef{CgroupRel: c.rel, Pod: a.figures(p, api, c)}
		if r, ok := a.retryAt[retryKey{p.UID, false}]; ok && time.Now().Before(r.at) {
			ref.Refused = true
		}
		ref.PIDsUnknown = true
		if !calm && c.tasks != nil {
			n, err := c.tasks.Count()
			if errors.Is(err, fs.ErrNotExist) {
				c.close()
				delete(a.cgs, p.UID)
				continue
			}
			ref.PIDs, ref.PIDsUnknown = n, err != nil
		}
		out = append(out, ref)
	}
	return out
}

// figures are what the policy ranks p by: from its API object when there
// is one (the kubelet's own figures), otherwise from the node alone: the
// QoS class from where its cgroup is, a Guaranteed pod's memory request
// from its cgroup's limit (its requests equal its limits), and no
// priority (0) nor request for the others. A static pod is critical
// either way, as the kubelet's IsCriticalPod says.
func (a *Actor) figures(p Pod, api *corev1.Pod, c *podCgroup) evictionapi.Pod {
	o := evictionapi.Pod{UID: p.UID, Namespace: p.Namespace, Name: p.Name, QOS: p.QOS, Static: p.Static, Critical: p.Static,
		Exempt: a.exempt[p.Namespace+"/"+p.Name], CgroupID: c.id, GracePeriod: 30 * time.Second,
		// No storage figures: the kubelet's disk evictions are its own.
		InodesUnknown: true}
	if api != nil {
		req := qos.PodRequests(api)
		o.Priority, o.Critical = qos.Priority(api), p.Static || qos.IsCritical(api)
		o.MemoryRequest, o.EphemeralRequest = req.Memory().Value(), req.StorageEphemeral().Value()
		if g := api.Spec.TerminationGracePeriodSeconds; g != nil {
			o.GracePeriod = time.Duration(*g) * time.Second
		}
		return o
	}
	if p.QOS == corev1.PodQOSGuaranteed {
		o.MemoryRequest = c.limit
	}
	if a.pods != nil && a.synced.Load() {
		// The API server lists the node's pods, but not this one: one
		// made a moment ago, or a nodeName that is not the kubelet's.
		// Its priority is unknown, and it may be critical: not evicted
		// until it is listed (Sync warns). Before the first listing (an
		// API server not reached since the start) the node's figures
		// stand: memory comes first.
		o.Critical = true
	}
	return o
}

// stopping reports whether the API has the pod on its way out: deleted,
// or terminal (the kubelet's eviction writes Failed before it deletes
// nothing, and a pod's controller replaces it from there).
func stopping(p *corev1.Pod) bool {
	return p != nil && (p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded)
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

// Resolve labels the pods' cgroups for the metrics (metrics.Resolver).
func (a *Actor) Resolve(k pressure.CgroupKey) (metrics.PodLabels, bool) {
	if k.HierarchyID != a.cfg.Finder.Layout.Memory.ID {
		return metrics.PodLabels{}, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	l, ok := a.byID[k.ID]
	return l, ok
}

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

func (a *Actor) foundPod(uid types.UID) (Pod, bool) {
	fp := a.found.Load()
	if fp == nil {
		return Pod{}, false
	}
	for _, p := range *fp {
		if p.UID == uid {
			return p, true
		}
	}
	return Pod{}, false
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

// Counts returns what the actor did so far.
func (a *Actor) Counts() Counts {
	a.mu.Lock()
	pending := len(a.pending)
	a.mu.Unlock()
	return Counts{Killed: a.killed.Load(), Evictions: a.evictions.Load(), Deletes: a.deletes.Load(), Refused: a.refused.Load(),
		APIErrors: a.apiErrors.Load(), KubeletEvicting: a.kubeletEvicting.Load(), Pending: pending}
}

// SetOOMScoreAdj raises every process of the pod to adj (the next
// victim's raise), recording what each had: the kubelet's value, which
// RestoreOOMScoreAdj puts back. Nothing else of the kubelet's choices is
// ever written.
func (a *Actor) SetOOMScoreAdj(uid types.UID, adj int) error {
	p, ok := a.foundPod(uid)
	if !ok {
		return fmt.Errorf("set oom_score_adj of pod %s: %w", uid, ErrNotFound)
	}
	d, err := a.cfg.Finder.Layout.Memory.Resolve(p.Cgroup)
	if err != nil {
		return fmt.Errorf("set oom_score_adj of pod %s: %w", uid, err)
	}
	pids, err := cgroups.TreeProcs(d.Path)
	if err != nil {
		return fmt.Errorf("set oom_score_adj of pod %s: %w", uid, err)
	}
	if err := a.raiser.Raise(uid, pids, adj); err != nil {
		return fmt.Errorf("set oom_score_adj of pod %s: %w", uid, err)
	}
	return nil
}

// RestoreOOMScoreAdj puts back what SetOOMScoreAdj raised: each raised
// process gets its own value back; a process forked in the pod since
// (which inherited the raised value) gets its nearest raised ancestor's.
// A process the runtime started in the pod since has the kubelet's value
// already, and is not written.
func (a *Actor) RestoreOOMScoreAdj(uid types.UID) error {
	recs, restored, err := a.raiser.Restore(uid, nil)
	if err != nil {
		err = fmt.Errorf("restore oom_score_adj of pod %s: %w", uid, err)
	}
	p, ok := a.foundPod(uid)
	if !ok || len(recs) == 0 {
		return err
	}
	d, rerr := a.cfg.Finder.Layout.Memory.Resolve(p.Cgroup)
	if rerr != nil {
		return err
	}
	pids, lerr := cgroups.TreeProcs(d.Path)
	if lerr != nil {
		return err
	}
	errs := []error{err}
	for _, pid := range pids {
		if restored[pid] {
			continue
		}
		if v, ok := oomadj.Was(recs, pid, oomadj.MaxDepth); ok {
			if werr := oomadj.Write(pid, v); werr != nil && !oomadj.Exited(werr) {
				errs = append(errs, fmt.Errorf("restore oom_score_adj of pod %s: %w", uid, werr))
			}
		}
	}
	return errors.Join(errs...)
}

// statusPatch is a strategic merge patch of the pod's status that carries
// its UID, as the kubelet's status patches do: the API server refuses it
// (Conflict) when the pod of that name is another one now.
func statusPatch(uid types.UID, st corev1.PodStatus) ([]byte, error) {
	return json.Marshal(map[string]any{"metadata": map[string]any{"uid": uid}, "status": st})
}
