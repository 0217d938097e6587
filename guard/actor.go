package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/nodeguard/nodeguard/evictionapi"
	"github.com/nodeguard/nodeguard/internal/statestore"
	"github.com/nodeguard/nodeguard/metrics"
	"github.com/nodeguard/nodeguard/oomadj"
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

// Found returns the pods found by the last Sync.
func (a *Actor) Found() []Pod {
	if fp := a.found.Load(); fp != nil {
		return *fp
	}
	return nil
}

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

func (a *Actor) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for uid, c := range a.cgs {
		c.close()
		delete(a.cgs, uid)
	}
}

// Counts returns what the actor did so far.
func (a *Actor) Counts() Counts {
	a.mu.Lock()
	pending := len(a.pending)
	a.mu.Unlock()
	return Counts{Killed: a.killed.Load(), Evictions: a.evictions.Load(), Deletes: a.deletes.Load(), Refused: a.refused.Load(),
		APIErrors: a.apiErrors.Load(), KubeletEvicting: a.kubeletEvicting.Load(), Pending: pending}
}
