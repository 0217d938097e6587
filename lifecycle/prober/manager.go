package prober

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Container is what the Manager knows of a pod's container, told by its
// owner after each look at the runtime.
type Container struct {
	ID        string
	Running   bool
	StartedAt time.Time
	PodIP     string
	// WasReady and WasStarted: the pod's last published status said this
	// very container (same ID) was ready, or started. An agent that
	// restarts and adopts its running containers takes them as the
	// results its probes had counted, until its own probes count others:
	// the kubelet starts every adopted container not ready and flaps the
	// pod out of its Services' endpoints on each restart
	// (kubernetes/kubernetes#100277); nodeguard does not.
	WasReady, WasStarted bool
}

// Update is a probe result that changed.
type Update struct {
	PodUID      types.UID
	Container   string
	ContainerID string
	Kind        Kind
	Result      Result
	Message     string
}

// Event is what the kubelet's prober records of one probe run: a failure
// or an error (Warning Unhealthy), or a success with a warning (Warning
// ProbeWarning, an HTTP redirect it did not follow), with the kubelet's
// message ("Liveness probe failed: ...").
type Event struct {
	Pod         *corev1.Pod
	Container   string
	ContainerID string
	Kind        Kind
	Reason      string
	Message     string
}

// The kubelet's reasons of probe events (pkg/kubelet/events).
const (
	ReasonUnhealthy    = "Unhealthy"
	ReasonProbeWarning = "ProbeWarning"
)

// Config wires a Manager.
type Config struct {
	// Prober makes the probes (Handlers).
	Prober Prober
	// OnUpdate is called, from a worker, with every result that changes;
	// it must not block.
	OnUpdate func(Update)
	// OnEvent, when set, is called, from a worker, with the event of
	// every probe run that failed, could not be made or warned,
	// thresholds or not, as the kubelet records one for each. It must not
	// block.
	OnEvent func(Event)
	Logger  *slog.Logger
	Now     func() time.Time
	// Spread places every worker's probes where its start fell, as the
	// kubelet's tickers, instead of the network probes on DefaultGrid
	// from the Manager's start (see schedule): for comparison.
	Spread bool
}

type resultKey struct {
	uid       types.UID
	container string
	kind      Kind
}

type ctrKey struct {
	uid       types.UID
	container string
}

type result struct {
	containerID string
	result      Result
}

// CountKey labels prober_probe_total, as the kubelet's.
type CountKey struct {
	ProbeType, Result, Container, Pod, Namespace string
}

type podWorkers struct {
	cancel          context.CancelFunc
	done            sync.WaitGroup
	namespace, name string
}

// Manager runs the probe workers of every pod it is given.
type Manager struct {
	cfg   Config
	log   *slog.Logger
	now   func() time.Time
	start time.Time
	// schedule's epoch is the Manager's start on the real clock: timers
	// run on it, whatever Now says.
	schedule schedule

	mu         sync.Mutex
	pods       map[types.UID]*podWorkers
	containers map[ctrKey]Container
	results    map[resultKey]result
	probed     map[resultKey]*worker // the workers there are
	counts     map[CountKey]uint64
}

// NewManager returns a Manager.
func NewManager(cfg Config) *Manager {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sched := schedule{epoch: time.Now(), grid: DefaultGrid}
	if cfg.Spread {
		sched.grid = 0
	}
	return &Manager{cfg: cfg, log: log, now: cfg.Now, start: cfg.Now(), schedule: sched, pods: map[types.UID]*podWorkers{},
		containers: map[ctrKey]Container{}, results: map[resultKey]result{}, probed: map[resultKey]*worker{}, counts: map[CountKey]uint64{}}
}

// AddPod starts the workers of pod's probed containers, once per pod (a
// pod's spec does not change while it runs). They stop with ctx or
// RemovePod. Init containers are not probed.
func (m *Manager) AddPod(ctx context.Context, pod *corev1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.pods[pod.UID]; ok {
		return
	}
	var ws []*worker
	for _, c := range Containers(pod) {
		for _, k := range []Kind{Startup, Liveness, Readiness} {
			if k.spec(c) != nil {
				w := newWorker(m, pod, c, k)
				ws = append(ws, w)
				m.probed[w.key] = w
			}
		}
	}
	if len(ws) == 0 {
		return
	}
	wctx, cancel := context.WithCancel(ctx)
	pw := &podWorkers{cancel: cancel, namespace: pod.Namespace, name: pod.Name}
	for _, w := range ws {
		pw.done.Add(1)
		go func() {
			defer pw.done.Done()
			w.run(wctx)
		}()
	}
	m.pods[pod.UID] = pw
}

// RemovePod stops the pod's workers, waits for them, and forgets its
// results.
func (m *Manager) RemovePod(uid types.UID) {
	m.mu.Lock()
	pw := m.pods[uid]
	delete(m.pods, uid)
	m.mu.Unlock()
	if pw != nil {
		pw.cancel()
		pw.done.Wait()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.containers {
		if k.uid == uid {
			delete(m.containers, k)
		}
	}
	for k := range m.results {
		if k.uid == uid {
			delete(m.results, k)
		}
	}
	for k := range m.probed {
		if k.uid == uid {
			delete(m.probed, k)
		}
	}
	if pw != nil {
		// As the kubelet's workers on stop: the pod's series go.
		for k := range m.counts {
			if k.Pod == pw.name && k.Namespace == pw.namespace {
				delete(m.counts, k)
			}
		}
	}
}

// Stop stops every pod's workers and waits for them.
func (m *Manager) Stop() {
	m.mu.Lock()
	uids := make([]types.UID, 0, len(m.pods))
	for uid := range m.pods {
		uids = append(uids, uid)
	}
	m.mu.Unlock()
	for _, uid := range uids {
		m.RemovePod(uid)
	}
}

// SetContainer records what the runtime says of a pod's container.
//
// A running container it has no result for yet that the last published
// status said was started or ready (Container.WasStarted, WasReady) has
// that result at once, for a probe of that kind it has; its worker counts
// from there. Readiness is carried only with a start: carried (its own
// WasStarted) or needless (no startup probe).
func (m *Manager) SetContainer(uid types.UID, name string, c Container) {
	var carried []Update
	m.mu.Lock()
	m.containers[ctrKey{uid, name}] = c
	if c.Running && c.ID != "" {
		started := m.probed[resultKey{uid, name, Startup}] == nil || c.WasStarted
		for _, k := range []Kind{Startup, Readiness} {
			key := resultKey{uid, name, k}
			was := (k == Startup && c.WasStarted) || (k == Readiness && c.WasReady && started)
			if !was || m.probed[key] == nil {
				continue
			}
			// Carried and recorded in one locked step: the worker's first
			// look (setInitial) comes before it, and keeps it, or after it
			// and finds it; never between.
			if u, ok := m.setInitialLocked(key, c.ID, Success); ok {
				carried = append(carried, u)
			}
		}
	}
	m.mu.Unlock()
	for _, u := range carried {
		m.report(u)
	}
}

func (m *Manager) container(uid types.UID, name string) (Container, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.containers[ctrKey{uid, name}]
	return c, ok
}

// Result returns the result of container id's probe of kind k: the
// initial one until a threshold is reached, and ok false when the
// container has no such probe (or the worker has not seen id yet).
func (m *Manager) Result(uid types.UID, name, id string, k Kind) (Result, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.results[resultKey{uid, name, k}]
	if !ok || r.containerID != id {
		return Unknown, false
	}
	return r.result, true
}

// Started tells whether container id has started as far as probes go: it
// has no startup probe, or that probe has succeeded for id.
func (m *Manager) Started(uid types.UID, name, id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := resultKey{uid, name, Startup}
	if m.probed[k] == nil {
		return true
	}
	r, ok := m.results[k]
	return ok && r.containerID == id && r.result == Success
}

// Ready tells whether container id passes its readiness probe: it has
// started, and has none or that probe's last counted result is Success.
func (m *Manager) Ready(uid types.UID, name, id string, hasReadinessProbe bool) bool {
	if !m.Started(uid, name, id) {
		return false
	}
	if !hasReadinessProbe {
		return true
	}
	r, ok := m.Result(uid, name, id, Readiness)
	return ok && r == Success
}

// Trigger asks the worker of container name's probe of kind k for a probe
// now, besides its schedule, when it has not probed the container the
// Manager knows yet (SetContainer): as the kubelet's prober manager does
// when it makes the status of a started container that is not ready, a
// new container is found ready when it is, not a period after its
// worker's last instant found it not yet there. A container already
// probed waits for its instants, however often its status is made. It
// never blocks; one trigger pending is enough.
func (m *Manager) Trigger(uid types.UID, name string, k Kind) {
	m.mu.Lock()
	w := m.probed[resultKey{uid, name, k}]
	m.mu.Unlock()
	if w == nil {
		return
	}
	select {
	case w.trigger <- struct{}{}:
	default:
	}
}

// setInitial records r as container id's result unless id has one
// already (carried over from its published status, or counted).
func (m *Manager) setInitial(k resultKey, id string, r Result) {
	m.mu.Lock()
	u, ok := m.setInitialLocked(k, id, r)
	m.mu.Unlock()
	if ok {
		m.report(u)
	}
}

// setInitialLocked is setInitial's check and write, with m.mu held; ok
// reports a result recorded, to be reported once the lock is let go.
func (m *Manager) setInitialLocked(k resultKey, id string, r Result) (Update, bool) {
	if old, had := m.results[k]; had && old.containerID == id {
		return Update{}, false
	}
	m.results[k] = result{containerID: id, result: r}
	return Update{PodUID: k.uid, Container: k.container, ContainerID: id, Kind: k.kind, Result: r}, true
}

// report tells Config.OnUpdate of a changed result; never with m.mu held.
func (m *Manager) report(u Update) {
	if m.cfg.OnUpdate != nil {
		m.cfg.OnUpdate(u)
	}
}

// set records a result and reports it if it changed.
func (m *Manager) set(k resultKey, id string, r Result, msg string) {
	m.mu.Lock()
	old, had := m.results[k]
	m.results[k] = result{containerID: id, result: r}
	m.mu.Unlock()
	if had && old.containerID == id && old.result == r {
		return
	}
	m.report(Update{PodUID: k.uid, Container: k.container, ContainerID: id, Kind: k.kind, Result: r, Message: msg})
}

func (m *Manager) count(pod *corev1.Pod, k resultKey, r Result) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.counts[CountKey{ProbeType: k.kind.String(), Result: r.metricLabel(), Container: k.container, Pod: pod.Name, Namespace: pod.Namespace}]++
}

// Count is one series of prober_probe_total.
type Count struct {
	CountKey
	Value uint64
}

// Counts returns prober_probe_total's series, sorted by their labels.
func (m *Manager) Counts() []Count {
	m.mu.Lock()
	out := make([]Count, 0, len(m.counts))
	for k, v := range m.counts {
		out = append(out, Count{k, v})
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].CountKey, out[j].CountKey
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Pod != b.Pod {
			return a.Pod < b.Pod
		}
		if a.Container != b.Container {
			return a.Container < b.Container
		}
		if a.ProbeType != b.ProbeType {
			return a.ProbeType < b.ProbeType
		}
		return a.Result < b.Result
	})
	return out
}
