package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/lifecycle/logs"
	"github.com/nodeguard/nodeguard/lifecycle/podspec"
	"github.com/nodeguard/nodeguard/lifecycle/qos"
	"github.com/nodeguard/nodeguard/mounts"
	"github.com/nodeguard/nodeguard/netplumb"
)

// Errors callers tell apart.
var (
	ErrNotFound = errors.New("pod not found")
	// ErrContainerNotFound is wrapped for a container the pod does not
	// have; it is ErrNotFound too.
	ErrContainerNotFound error = containerNotFound{}
	ErrInvalid                 = errors.New("invalid pod")
	// ErrRejected: admission refused the pod (node pressure).
	ErrRejected = errors.New("pod rejected")
)

// Labels and annotations nodeguard adds to what it creates.
const (
	// AnnotationCgroupParent records the pod cgroup on its sandbox, so that
	// a sandbox found after a restart can be removed with its cgroups.
	AnnotationCgroupParent = "nodeguard.io/cgroup-parent"
	// AnnotationSource says where the pod came from (file or api).
	AnnotationSource = "nodeguard.io/source"
)

// Defaults, each with its reason.
const (
	// DefaultBackoffInitial and DefaultBackoffMax are the kubelet's
	// container restart back-off (pkg/kubelet/kubelet.go: 10 s doubling,
	// capped at 5 min).
	DefaultBackoffInitial = 10 * time.Second
	DefaultBackoffMax     = 5 * time.Minute
	// DefaultResync: how often every pod is compared with the runtime
	// when nothing asked for it sooner.
	DefaultResync = time.Second
	// callTimeout bounds one CRI call; RunPodSandbox measured 115-300 ms.
	callTimeout = 30 * time.Second
	// orphanGrace stops a container of a pod nobody wants any more.
	orphanGrace = 2 * time.Second
)

// Config wires a Manager.
type Config struct {
	Runtime Runtime
	Cgroups *kubepods.Manager
	// RootDir holds per-pod state: logs under RootDir/logs.
	RootDir string
	// MemoryCapacity of the node in bytes, for Burstable oom_score_adj.
	MemoryCapacity int64
	// DNS is the node's resolver config handed to sandboxes.
	DNS *runtimeapi.DNSConfig
	// PodOptions validate manifests (priority classes, privileged).
	PodOptions podspec.Options
	// CgroupV2 tells container configs to ask for memory.oom.group.
	CgroupV2                   bool
	BackoffInitial, BackoffMax time.Duration
	Resync                     time.Duration
	// Workers bounds how many pods are synced at once (default 8: CRI
	// calls of different pods overlap, as the kubelet's per-pod workers).
	Workers int
	// Stops bounds the containers waiting out their grace period at once
	// (DefaultStops when zero); they hold no Workers slot.
	Stops  int
	Logger *slog.Logger
	Now    func() time.Time
	// HasCapSysResource and MinOOMScoreAdj: without CAP_SYS_RESOURCE
	// oom_score_adj cannot go below the runtime's own minimum.
	HasCapSysResource bool
	MinOOMScoreAdj    int
	// Volumes mounts pod volumes; nil refuses every pod with volumes.
	Volumes *mounts.Manager
	// Network verifies each sandbox's plumbing and collects what dead
	// sandboxes left; nil trusts the runtime's word.
	Network *Network
	// GCInterval: how often volumes and the network are collected
	// (DefaultGCInterval when zero).
	GCInterval time.Duration
	// Admit, when set, may refuse a new pod (the eviction manager refuses
	// BestEffort pods while the node is under memory pressure). A pod
	// already desired is never refused again.
	Admit func(pod *corev1.Pod) error
	// LocalStorage enforces ephemeral-storage limits and emptyDir
	// sizeLimits (localstorage.go); the zero value does.
	LocalStorage LocalStorageConfig
	// ContainerLogs bounds each container's log files (the kubelet's
	// containerLogMaxSize and containerLogMaxFiles; their defaults where
	// zero), checked every ContainerLogMonitorInterval
	// (logs.DefaultInterval when zero).
	ContainerLogs               logs.Policy
	ContainerLogMonitorInterval time.Duration
}

// Manager runs pods. Its methods are safe for concurrent use.
type Manager struct {
	cfg  Config
	log  *slog.Logger
	now  func() time.Time
	kick chan struct{}

	// sourcesReady: every pod source has been read once. Until then a
	// sandbox without a desired pod may just not be loaded yet, so it is
	// not removed (a restarted nodeguard must adopt, not kill).
	sourcesReady atomic.Bool

	mu   sync.Mutex
	pods map[types.UID]*podState
	// orphans: the pod UIDs whose orphaned sandboxes a worker is tearing
	// down (orphans.go).
	orphans map[types.UID]bool
	// slots bounds the CRI calls in flight (slots.go).
	slots *slots
	// clampedOnce: the oom_score_adj clamp is logged once.
	clampedOnce sync.Once

	// createMu: sandboxes are created under its read lock and the
	// network collected under its write lock.
	createMu sync.RWMutex
	// gcRunning: one collection at a time; lastGC: when it last started.
	gcRunning atomic.Bool
	lastGC    time.Time
	// beat: the Run loop's last pass, unix nanoseconds (heartbeat.go).
	beat atomic.Int64
	// relisted: the containers' states at the last relist (Run's
	// goroutine only).
	relisted map[string]relistEntry
	// ephemeral: each pod's ephemeral storage at the last Storage sample.
	ephemeral atomic.Pointer[map[types.UID]storageUse]
	// qosErr: the last error setting the QoS cgroups, logged once (Run's
	// goroutine only).
	qosErr string
	// ls: the local-storage passes (localstorage.go).
	ls *localStorage
	// rotator rotates the containers' logs (containerlogs.go).
	rotator *logs.Rotator
}

type backoff struct {
	until time.Time
	delay time.Duration
}

type podState struct {
	pod        *corev1.Pod
	source     string
	deleting   bool
	sandboxID  string
	sandboxCfg *runtimeapi.PodSandboxConfig
	parent     string
	ip         string
	created    time.Time
	backoff    map[string]*backoff
	pulls      map[string]*pullBackoff // image pull back-off (images.go)
	status     corev1.PodStatus
	lastErr    string
	kick       chan struct{} // wakes the pod's worker
	volumes    *mounts.PodVolumes
	evicted    *eviction // set once the eviction manager ended it
	working    bool      // a worker runs for this pod (guarded by Manager.mu)
}

func (st *podState) poke() {
	select {
	case st.kick <- struct{}{}:
	default:
	}
}

// SourceAPI is the source of pods applied through the local API; they are
// persisted under RootDir/api-pods so that a restarted nodeguard keeps them.
const SourceAPI = "api"

func (m *Manager) persistDir() string { return filepath.Join(m.cfg.RootDir, "api-pods") }

func (m *Manager) persistPath(uid types.UID) string {
	return filepath.Join(m.persistDir(), string(uid)+".json")
}

// persist writes an API pod atomically (temp file, fsync, rename).
func (m *Manager) persist(p *corev1.Pod) error {
	if err := os.MkdirAll(m.persistDir(), 0o700); err != nil {
		return fmt.Errorf("persist pod %s: %w", key(p), err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("persist pod %s: %w", key(p), err)
	}
	tmp, err := os.CreateTemp(m.persistDir(), ".pod-*")
	if err != nil {
		return fmt.Errorf("persist pod %s: %w", key(p), err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("persist pod %s: %w", key(p), err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("persist pod %s: %w", key(p), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("persist pod %s: %w", key(p), err)
	}
	if err := os.Rename(tmp.Name(), m.persistPath(p.UID)); err != nil {
		return fmt.Errorf("persist pod %s: %w", key(p), err)
	}
	return nil
}

// loadPersisted reads the API pods of an earlier run. A file that does
// not decode is reported and left for the operator, never guessed at.
func (m *Manager) loadPersisted() error {
	entries, err := os.ReadDir(m.persistDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("load persisted pods: %w", err)
	}
	var pods []*corev1.Pod
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(m.persistDir(), e.Name()))
		if err != nil {
			return fmt.Errorf("load persisted pods: %w", err)
		}
		var p corev1.Pod
		if err := json.Unmarshal(b, &p); err != nil {
			m.log.Error("persisted pod does not decode; left in place", "file", e.Name(), "err", err)
			continue
		}
		pods = append(pods, &p)
	}
	if len(pods) == 0 {
		return nil
	}
	_, err = m.apply(pods, SourceAPI)
	return err
}

// New returns a Manager; Run starts it.
func New(cfg Config) (*Manager, error) {
	if cfg.Runtime == nil || cfg.Cgroups == nil || cfg.RootDir == "" {
		return nil, errors.New("new pod manager: runtime, cgroups and root dir are required")
	}
	if cfg.MemoryCapacity <= 0 {
		return nil, fmt.Errorf("new pod manager: memory capacity %d: want the node's memory in bytes", cfg.MemoryCapacity)
	}
	if cfg.BackoffInitial <= 0 {
		cfg.BackoffInitial = DefaultBackoffInitial
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = DefaultBackoffMax
	}
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 8
	}
	if cfg.Stops <= 0 {
		cfg.Stops = DefaultStops
	}
	if cfg.GCInterval <= 0 {
		cfg.GCInterval = DefaultGCInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rotator, err := newRotator(cfg, log)
	if err != nil {
		return nil, fmt.Errorf("new pod manager: %w", err)
	}
	m := &Manager{cfg: cfg, log: log, now: cfg.Now, kick: make(chan struct{}, 1), pods: map[types.UID]*podState{},
		orphans: map[types.UID]bool{}, slots: newSlots(cfg.Workers, cfg.Stops), ls: newLocalStorage(cfg.LocalStorage), rotator: rotator}
	if err := m.loadPersisted(); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Manager) poke() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// Apply validates pods and makes them desired. A pod with the name of a
// desired pod but another spec replaces it (the old one is removed first,
// as a static pod whose manifest changed).
func (m *Manager) Apply(_ context.Context, pods []*corev1.Pod, source string) ([]*corev1.Pod, error) {
	return m.apply(pods, source)
}

func (m *Manager) apply(pods []*corev1.Pod, source string) ([]*corev1.Pod, error) {
	var out []*corev1.Pod
	for _, p := range pods {
		p = p.DeepCopy()
		podspec.Default(p, source)
		if prio, ferr := podspec.ResolvePriority(p, m.cfg.PodOptions); ferr != nil {
			return nil, fmt.Errorf("%w: pod %s/%s: %s", ErrInvalid, p.Namespace, p.Name, ferr.Error())
		} else if p.Spec.Priority == nil {
			p.Spec.Priority = &prio
		}
		warnings, errs := podspec.Validate(p, m.cfg.PodOptions)
		// Bandwidth annotations are refused here, with their key, not by
		// the runtime's RunPodSandbox later.
		for _, k := range []string{netplumb.AnnotationIngressBandwidth, netplumb.AnnotationEgressBandwidth} {
			if v, ok := p.Annotations[k]; ok {
				if _, err := netplumb.BandwidthFromAnnotations(map[string]string{k: v}); err != nil {
					errs = append(errs, field.Invalid(field.NewPath("metadata", "annotations").Key(k), v, err.Error()))
				}
			}
		}
		if m.cfg.Volumes != nil {
			// What only this node can judge: the hostPath allowlist and
			// types, traversal in paths.
			errs = append(errs, m.cfg.Volumes.Validate(p)...)
		} else {
			// Without a volume manager, refusing beats starting
			// containers without their volumes.
			for i, v := range p.Spec.Volumes {
				errs = append(errs, field.NotSupported(field.NewPath("spec", "volumes").Index(i), v.Name, []string{}))
			}
		}
		if len(errs) > 0 {
			return nil, fmt.Errorf("%w: pod %s/%s: %s", ErrInvalid, p.Namespace, p.Name, errs.ToAggregate().Error())
		}
		if m.cfg.Admit != nil && !m.desired(p.UID) {
			if err := m.cfg.Admit(p); err != nil {
				return nil, fmt.Errorf("%w: pod %s/%s: %w", ErrRejected, p.Namespace, p.Name, err)
			}
		}
		warnings = append(warnings, m.unenforcedLocalStorage(p, source)...)
		for _, w := range warnings {
			m.log.Warn("pod field ignored", "pod", p.Namespace+"/"+p.Name, "warning", w)
		}
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[AnnotationSource] = source
		if p.CreationTimestamp.IsZero() {
			p.CreationTimestamp = metav1.NewTime(m.now())
		}
		out = append(out, p)
	}
	if source == SourceAPI {
		for _, p := range out {
			if err := m.persist(p); err != nil {
				return nil, err
			}
		}
	}
	m.mu.Lock()
	for _, p := range out {
		for uid, st := range m.pods {
			if st.pod.Namespace == p.Namespace && st.pod.Name == p.Name && uid != p.UID && !st.deleting {
				st.deleting = true
				st.poke()
			}
		}
		if st, ok := m.pods[p.UID]; ok && !st.deleting {
			// The same UID is the same pod (UIDs of manifests are
			// derived from their content); a pod is never mutated in
			// place, so the reconciler may read st.pod unlocked.
			continue
		}
		st := &podState{pod: p, source: source, backoff: map[string]*backoff{}, created: m.now(), kick: make(chan struct{}, 1),
			status: corev1.PodStatus{Phase: corev1.PodPending}}
		if ev := m.loadEviction(p.UID); ev != nil {
			st.evicted = ev
			st.status = corev1.PodStatus{Phase: corev1.PodFailed, Reason: ReasonEvicted, Message: ev.Message}
		}
		m.pods[p.UID] = st
	}
	m.mu.Unlock()
	m.poke()
	return out, nil
}

// Delete stops and removes a pod; it returns once the removal is queued.
func (m *Manager) Delete(_ context.Context, namespace, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, st := range m.pods {
		if st.pod.Namespace == namespace && st.pod.Name == name && !st.deleting {
			st.deleting = true
			st.poke()
			if st.source == SourceAPI {
				if err := os.Remove(m.persistPath(st.pod.UID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
					m.log.Warn("forget persisted pod", "pod", key(st.pod), "err", err)
				}
			}
			m.poke()
			return nil
		}
	}
	return fmt.Errorf("%w: %s/%s", ErrNotFound, namespace, name)
}

// Forget drops pods of a source that are no longer in it (the manifest
// directory lost a file); keep are the UIDs still there.
func (m *Manager) Forget(source string, keep map[types.UID]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for uid, st := range m.pods {
		if st.source == source && !keep[uid] && !st.deleting {
			st.deleting = true
			st.poke()
		}
	}
	m.poke()
}

// desiredPods are the pod specs the node runs, unevicted: what the QoS
// cgroups' cpu shares are computed from.
func (m *Manager) desiredPods() []*corev1.Pod {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(m.pods))
	for _, st := range m.pods {
		if st.evicted == nil {
			out = append(out, st.pod)
		}
	}
	return out
}

// List returns every pod with its status, sorted by namespace and name.
func (m *Manager) List() []*corev1.Pod {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(m.pods))
	for _, st := range m.pods {
		out = append(out, st.view())
	}
	slices.SortFunc(out, func(a, b *corev1.Pod) int {
		if a.Namespace != b.Namespace {
			return cmpString(a.Namespace, b.Namespace)
		}
		return cmpString(a.Name, b.Name)
	})
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Get returns one pod with its status.
func (m *Manager) Get(namespace, name string) (*corev1.Pod, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, st := range m.pods {
		if st.pod.Namespace == namespace && st.pod.Name == name {
			return st.view(), true
		}
	}
	return nil, false
}

func (st *podState) view() *corev1.Pod {
	p := st.pod.DeepCopy()
	p.Status = *st.status.DeepCopy()
	p.Status.QOSClass = qos.Class(st.pod)
	if st.deleting {
		now := metav1.Now()
		p.DeletionTimestamp = &now
	}
	return p
}

// SourcesReady says that every pod source (the manifest directory, the
// persisted API pods) has been loaded: from now on a nodeguard sandbox
// whose pod is not desired is removed.
func (m *Manager) SourcesReady() {
	m.sourcesReady.Store(true)
	m.poke()
}

// Run reconciles until ctx is done. Every pod has its own worker (as the
// kubelet's pod workers): a new or changed pod is synced at once, not at the
// next round, and a slow pod delays no other. At most Config.Workers pods
// talk to the runtime at a time; their containers waiting out a grace
// period are not counted there (slots.go). Run itself starts the workers
// of new pods and of the teardown of sandboxes nobody wants (orphans.go).
func (m *Manager) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.Resync)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { m.rotator.Run(ctx) })
	for {
		m.beat.Store(m.now().UnixNano())
		m.mu.Lock()
		for uid, st := range m.pods {
			// A pod whose UID's orphaned sandboxes are being torn down
			// waits for its worker until they are gone (orphans.go).
			if !st.working && !m.orphans[uid] {
				st.working = true
				wg.Add(1)
				go func() {
					defer wg.Done()
					m.podWorker(ctx, uid, st)
				}()
			}
		}
		m.mu.Unlock()
		m.removeOrphans(ctx, &wg)
		m.relist(ctx)
		m.maybeGC(ctx, &wg)
		m.maybeCheckLocalStorage(ctx, &wg)
		if err := m.cfg.Cgroups.UpdateQOS(ctx, m.desiredPods()); err != nil && err.Error() != m.qosErr {
			m.log.Warn("QoS cgroups' cpu shares", "err", err)
			m.qosErr = err.Error()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.kick:
		}
	}
}

// SteadyResyncFactor: a pod whose containers all run is synced every
// this many Resyncs; the relist catches state changes in between.
const SteadyResyncFactor = 15

// relist is the kubelet's PLEG in one call: every container of
// nodeguard's with its state, compared with the previous relist; the pod
// of every container that changed state, appeared or vanished is poked,
// so a steady pod's crash is handled within a Resync, not at its next
// (slow) resync.
func (m *Manager) relist(ctx context.Context) {
	cctx, cancel := call(ctx)
	ctrs, err := m.cfg.Runtime.ListContainers(cctx, "", nil)
	cancel()
	if err != nil {
		return // the pods' own syncs report runtime trouble
	}
	now := make(map[string]relistEntry, len(ctrs))
	changed := map[types.UID]bool{}
	for _, c := range ctrs {
		uid := types.UID(c.GetLabels()[cri.PodUIDLabel])
		now[c.Id] = relistEntry{uid: uid, state: c.State}
		if prev, ok := m.relisted[c.Id]; !ok || prev.state != c.State {
			changed[uid] = true
		}
	}
	for id, prev := range m.relisted {
		if _, ok := now[id]; !ok {
			changed[prev.uid] = true
		}
	}
	first := m.relisted == nil
	m.relisted = now
	if first {
		return
	}
	m.mu.Lock()
	for uid := range changed {
		if st, ok := m.pods[uid]; ok {
			st.poke()
		}
	}
	m.mu.Unlock()
}

type relistEntry struct {
	uid   types.UID
	state runtimeapi.ContainerState
}

// maybeGC starts a collection of volumes and the network in the
// background once every source is loaded, then every GCInterval.
func (m *Manager) maybeGC(ctx context.Context, wg *sync.WaitGroup) {
	if !m.sourcesReady.Load() || m.now().Sub(m.lastGC) < m.cfg.GCInterval || !m.gcRunning.CompareAndSwap(false, true) {
		return
	}
	m.lastGC = m.now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer m.gcRunning.Store(false)
		m.GC(ctx)
	}()
}

// GC collects, once, what pods that no longer exist left behind: volume
// directories and mounts, IP leases, veths and network namespaces.
func (m *Manager) GC(ctx context.Context) {
	if err := m.gcVolumes(ctx); err != nil {
		m.log.Warn("gc", "err", err)
	}
	if err := m.gcNetwork(ctx); err != nil {
		m.log.Warn("gc", "err", err)
	}
	if err := m.gcCgroups(ctx); err != nil {
		m.log.Warn("gc", "err", err)
	}
}

// gcCgroups removes the pod cgroups of pods nobody wants (killing what
// still runs in them): a nodeguard killed between a pod's sandbox removal
// and its cgroup's leaves one that no sandbox names any more. As for
// volumes, the cgroups are listed before the desired pods are read.
func (m *Manager) gcCgroups(ctx context.Context) error {
	parents, err := m.cfg.Cgroups.PodParents()
	if err != nil {
		return fmt.Errorf("cgroup gc: %w", err)
	}
	m.mu.Lock()
	var orphans []string
	for uid, parent := range parents {
		if _, ok := m.pods[uid]; !ok {
			orphans = append(orphans, parent)
		}
	}
	m.mu.Unlock()
	for _, parent := range orphans {
		m.removePodCgroup(ctx, parent, true)
		m.log.Info("cgroup gc: orphaned pod cgroup removed", "cgroup", parent)
	}
	return nil
}

func call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, callTimeout)
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
// pod whose containers all run is checked every SteadyResyncFactor
// Resyncs: a container that exits meanwhile is caught by the relist
// (relist), which pokes its pod within a Resync, as the kubelet's PLEG
// relists every second while its pod workers resync every minute. On a
// dense node hundreds of idle pods' status calls would otherwise compete
// with the pods being started and cost idle CPU.
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
		d = SteadyResyncFactor * m.cfg.Resync
	}
	now := m.now()
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
	case !deleting && evicted:
		m.syncEvicted(ctx, uid, st, sbs)
		return false
	case !deleting:
		m.syncPod(ctx, st, sbs)
		return false
	}
	for _, sb := range sbs {
		m.teardownSandbox(ctx, sb.Id, sb.GetAnnotations()[AnnotationCgroupParent], grace(st.pod), true)
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
	_ = os.Remove(m.evictedPath(uid))
	m.mu.Lock()
	delete(m.pods, uid)
	m.mu.Unlock()
	m.log.Info("pod removed", "pod", key(st.pod))
	return true
}

func key(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

func grace(p *corev1.Pod) time.Duration {
	if p.Spec.TerminationGracePeriodSeconds != nil {
		return time.Duration(*p.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return 30 * time.Second
}

func (m *Manager) logDir(p *corev1.Pod) string {
	return filepath.Join(m.cfg.RootDir, "logs", p.Namespace+"_"+p.Name+"_"+string(p.UID))
}

// teardownSandbox stops every container with the grace period, then the
// sandbox (which kills without grace), and removes both. parent is the pod
// cgroup the sandbox was made in ("" if unknown); with podGone the pod
// cgroup is removed too, as no other sandbox of the pod will use it. The
// caller holds a work slot.
func (m *Manager) teardownSandbox(ctx context.Context, id, parent string, g time.Duration, podGone bool) {
	cctx, cancel := call(ctx)
	ctrs, err := m.cfg.Runtime.ListContainers(cctx, id, nil)
	cancel()
	if err != nil {
		m.log.Warn("list containers of sandbox", "sandbox", id, "err", err)
	}
	// The stops wait out the grace period on stop slots, not on the
	// caller's work slot (slots.go).
	var stops []func()
	for _, c := range ctrs {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			stops = append(stops, func() {
				sctx, cancel := context.WithTimeout(ctx, g+callTimeout)
				defer cancel()
				if err := m.cfg.Runtime.StopContainer(sctx, c.Id, g); err != nil {
					m.log.Warn("stop container", "container", c.Id, "err", err)
				}
			})
		}
	}
	m.slots.waitOut(stops)
	cctx, cancel = call(ctx)
	defer cancel()
	if err := m.cfg.Runtime.StopPodSandbox(cctx, id); err != nil && !errors.Is(err, cri.ErrNotFound) {
		m.log.Warn("stop sandbox", "sandbox", id, "err", err) // a sandbox already gone is no news
	}
	remove := func(ctx context.Context) error { return m.cfg.Runtime.RemovePodSandbox(ctx, id) }
	err = remove(cctx)
	if errors.Is(err, cri.ErrFailedPrecondition) && parent != "" {
		ids := make([]string, 0, len(ctrs))
		for _, c := range ctrs {
			ids = append(ids, c.Id)
		}
		err = m.removeStranded(ctx, "sandbox", id, parent, ids, remove)
	}
	if err != nil {
		m.log.Warn("remove sandbox", "sandbox", id, "err", err)
	}
	if podGone && parent != "" {
		m.removePodCgroup(ctx, parent, false)
	}
}

// strandedRetries bounds the removal attempts after killing a stranded
// task: the shim sees the exit within milliseconds here; the waits double
// from 25 ms, 1.6 s in all.
const strandedRetries = 6

// removeStranded handles the runtime refusing to remove a container (or a
// sandbox, for its containers) because of a task it reports as created or
// exited: a StartContainer cut short (nodeguard killed mid-call, a
// deadline) leaves "runc init" waiting in the container's cgroup, and
// containerd will neither start nor delete it (containerd#11037).
//
// The task's processes are killed through the containers' cgroups beneath
// the pod cgroup parent (the runtime reports no pid for such a task), the
// stopped task is deleted through the runtime's own API (its CRI ignores
// the exit of a pid it never had), and remove is retried.
func (m *Manager) removeStranded(ctx context.Context, what, id, parent string, containers []string, remove func(context.Context) error) error {
	killed := 0
	for _, c := range containers {
		n, err := m.cfg.Cgroups.KillContainer(parent, c)
		if err != nil {
			m.log.Warn("kill a stranded task", "container", c, "err", err)
		}
		killed += n
	}
	var err error
	wait := 25 * time.Millisecond
	for attempt := 1; attempt <= strandedRetries; attempt++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait *= 2
		cctx, cancel := call(ctx)
		for _, c := range containers {
			if derr := m.cfg.Runtime.DeleteTask(cctx, c); derr != nil && !errors.Is(derr, cri.ErrNotContainerd) && !errors.Is(derr, cri.ErrFailedPrecondition) {
				m.log.Warn("delete a stranded task", "container", c, "err", derr)
			}
		}
		err = remove(cctx)
		cancel()
		if err == nil || !errors.Is(err, cri.ErrFailedPrecondition) {
			break
		}
	}
	m.log.Info("the runtime refused a removal for a stranded task; killed it, deleted the task and retried",
		what, id, "killed", killed, "err", err)
	return err
}

// removeContainer removes a container of the pod whose cgroup is parent,
// killing a stranded task that keeps the runtime from doing it.
func (m *Manager) removeContainer(ctx context.Context, parent, id string) error {
	logPath := m.logPath(ctx, id) // before the runtime forgets it (containerlogs.go)
	cctx, cancel := call(ctx)
	err := m.cfg.Runtime.RemoveContainer(cctx, id)
	cancel()
	if errors.Is(err, cri.ErrFailedPrecondition) && parent != "" {
		err = m.removeStranded(ctx, "container", id, parent, []string{id}, func(ctx context.Context) error {
			return m.cfg.Runtime.RemoveContainer(ctx, id)
		})
	}
	if err == nil {
		m.removeLog(id, logPath)
	}
	return err
}

// removePodCgroup removes a pod's cgroups. With kill, processes still in
// them are SIGKILLed first: only for a pod nobody wants any more.
func (m *Manager) removePodCgroup(ctx context.Context, parent string, kill bool) {
	err := m.cfg.Cgroups.Remove(ctx, parent)
	if kill && errors.Is(err, kubepods.ErrPopulated) {
		n, kerr := m.cfg.Cgroups.Kill(parent)
		m.log.Warn("processes the runtime does not know of were left in a removed pod's cgroup; killed", "cgroup", parent, "killed", n, "err", kerr)
		err = m.cfg.Cgroups.Remove(ctx, parent)
	}
	if err != nil {
		m.log.Warn("remove pod cgroup", "cgroup", parent, "err", err)
	}
}

// checkAdopted checks a running sandbox found for st's pod against the pod
// cgroup the configuration makes, and applies the pod's limits again.
func (m *Manager) checkAdopted(ctx context.Context, st *podState, sb *runtimeapi.PodSandbox) error {
	had := sb.GetAnnotations()[AnnotationCgroupParent]
	want, err := m.cfg.Cgroups.Parent(st.pod)
	if err != nil {
		return err
	}
	if !m.cfg.Cgroups.SameCgroup(had, want) {
		return fmt.Errorf("it was made in %q, this configuration's pod cgroup is %q", had, want)
	}
	if err := m.cfg.Cgroups.CheckSandbox(want, sb.Id); err != nil {
		return err
	}
	if _, err := m.cfg.Cgroups.Ensure(ctx, st.pod); err != nil {
		return fmt.Errorf("apply its limits again: %w", err)
	}
	return nil
}

// syncPod drives one desired pod one step towards its spec.
func (m *Manager) syncPod(ctx context.Context, st *podState, sbs []*runtimeapi.PodSandbox) {
	pod := st.pod
	// Adopt the newest ready sandbox; remove the others.
	var current *runtimeapi.PodSandbox
	for _, sb := range sbs {
		if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY && (current == nil || sb.CreatedAt > current.CreatedAt) {
			current = sb
		}
	}
	for _, sb := range sbs {
		if current == nil || sb.Id != current.Id {
			m.teardownSandbox(ctx, sb.Id, sb.GetAnnotations()[AnnotationCgroupParent], orphanGrace, false)
		}
	}
	// Volumes before the sandbox, as the kubelet mounts before it
	// creates: a pod whose volume cannot be set up gets no sandbox.
	if err := m.setupVolumes(ctx, st); err != nil {
		m.setError(st, "VolumeSetupFailed", err)
		return
	}
	if current != nil && st.sandboxID != current.Id && m.cfg.Network != nil && !pod.Spec.HostNetwork {
		// Adopting after a restart: a sandbox whose plumbing is gone (the
		// runtime crashed with it) is replaced, not trusted.
		cctx, cancel := call(ctx)
		s, err := m.cfg.Runtime.PodSandboxStatus(cctx, current.Id)
		cancel()
		if err == nil {
			err = m.verifyNetwork(ctx, pod, s)
		}
		if err != nil {
			m.log.Warn("adopted sandbox's network is broken; replacing it", "pod", key(pod), "sandbox", current.Id, "err", err)
			m.teardownSandbox(ctx, current.Id, current.GetAnnotations()[AnnotationCgroupParent], orphanGrace, false)
			current = nil
		}
	}
	if current != nil && st.sandboxID != current.Id {
		// Adopting: the sandbox must sit in the pod cgroup this
		// configuration makes (a driver or root changed since, an
		// upgrade from a relative root) and be placed as the driver
		// places it; otherwise it is replaced, since its limits,
		// statistics and kill would miss it. Kept, its limits are
		// applied again (Ensure is idempotent).
		if err := m.checkAdopted(ctx, st, current); err != nil {
			m.log.Warn("adopted sandbox is not in its pod cgroup; replacing it", "pod", key(pod), "sandbox", current.Id, "err", err)
			m.teardownSandbox(ctx, current.Id, current.GetAnnotations()[AnnotationCgroupParent], orphanGrace, false)
			current = nil
		}
	}
	if current == nil {
		if err := m.createSandbox(ctx, st); err != nil {
			m.setError(st, "SandboxFailed", err)
			return
		}
	} else if st.sandboxID != current.Id {
		parent := current.GetAnnotations()[AnnotationCgroupParent]
		m.mu.Lock()
		st.sandboxID, st.parent = current.Id, parent
		m.mu.Unlock()
		st.sandboxCfg = m.sandboxConfig(st)
		m.log.Info("pod adopted", "pod", key(pod), "sandbox", current.Id)
	}
	if st.ip == "" {
		cctx, cancel := call(ctx)
		if s, err := m.cfg.Runtime.PodSandboxStatus(cctx, st.sandboxID); err == nil {
			m.mu.Lock()
			st.ip = s.IP
			m.mu.Unlock()
		}
		cancel()
	}
	if err := m.syncContainers(ctx, st); err != nil {
		if ie, ok := errors.AsType[*imageError](err); ok {
			m.setImageError(st, ie)
			return
		}
		m.setError(st, "SyncFailed", err)
	}
}

func (m *Manager) setError(st *podState, reason string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	msg := err.Error()
	if st.evicted != nil {
		return
	}
	if st.lastErr != msg {
		m.log.Warn("pod sync failed", "pod", key(st.pod), "reason", reason, "err", err)
	}
	st.lastErr = msg
	st.status.Reason, st.status.Message = reason, msg
}

func (m *Manager) sandboxConfig(st *podState) *runtimeapi.PodSandboxConfig {
	cfg := cri.SandboxConfig(st.pod, cri.SandboxOptions{CgroupParent: st.parent, LogDir: m.logDir(st.pod), DNS: m.cfg.DNS})
	if cfg.Annotations == nil {
		cfg.Annotations = map[string]string{}
	}
	cfg.Annotations[AnnotationCgroupParent] = st.parent
	return cfg
}

func (m *Manager) createSandbox(ctx context.Context, st *podState) (retErr error) {
	if m.isEvicted(st) {
		return nil
	}
	parent, err := m.cfg.Cgroups.Ensure(ctx, st.pod)
	if err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			_ = m.cfg.Cgroups.Remove(ctx, parent)
		}
	}()
	m.mu.Lock()
	st.parent = parent
	m.mu.Unlock()
	if err := os.MkdirAll(m.logDir(st.pod), 0o750); err != nil {
		return fmt.Errorf("create log dir: %w", err)
	}
	cfg := m.sandboxConfig(st)
	cctx, cancel := call(ctx)
	defer cancel()
	m.createMu.RLock()
	id, err := m.cfg.Runtime.RunPodSandbox(cctx, cfg)
	m.createMu.RUnlock()
	if err != nil {
		return m.cfg.Cgroups.ExplainRunError(err)
	}
	if err := m.cfg.Cgroups.CheckSandbox(parent, id); err != nil {
		// The runtime put it elsewhere: the limits, statistics, tripwire
		// and kill would all miss its processes. Never keep it so.
		m.teardownSandbox(ctx, id, parent, orphanGrace, false)
		return fmt.Errorf("sandbox %s: %w", id, err)
	}
	if m.cfg.Network != nil && !st.pod.Spec.HostNetwork {
		s, err := m.cfg.Runtime.PodSandboxStatus(cctx, id)
		if err == nil {
			err = m.verifyNetwork(ctx, st.pod, s)
		}
		if err != nil {
			// The runtime said yes, the kernel says no: a sandbox without
			// its network is torn down (its cgroup with it) and made again.
			m.teardownSandbox(ctx, id, parent, orphanGrace, false)
			return fmt.Errorf("sandbox %s: %w", id, err)
		}
	}
	m.mu.Lock()
	st.sandboxID, st.sandboxCfg, st.ip = id, cfg, ""
	m.mu.Unlock()
	m.log.Info("sandbox started", "pod", key(st.pod), "sandbox", id, "cgroup", parent)
	return nil
}

type containerNotFound struct{}

func (containerNotFound) Error() string        { return "container not found" }
func (containerNotFound) Is(target error) bool { return target == ErrNotFound }

// latest returns, per container name, the newest attempt.
func latest(ctrs []*runtimeapi.Container) map[string]*runtimeapi.Container {
	out := map[string]*runtimeapi.Container{}
	for _, c := range ctrs {
		n := c.GetMetadata().GetName()
		if cur, ok := out[n]; !ok || c.GetMetadata().GetAttempt() > cur.GetMetadata().GetAttempt() {
			out[n] = c
		}
	}
	return out
}

func (m *Manager) syncContainers(ctx context.Context, st *podState) error {
	pod := st.pod
	cctx, cancel := call(ctx)
	ctrs, err := m.cfg.Runtime.ListContainers(cctx, st.sandboxID, nil)
	cancel()
	if err != nil {
		return err
	}
	byName := latest(ctrs)
	states := map[string]cri.State{}
	for name, c := range byName {
		cctx, cancel := call(ctx)
		s, err := m.cfg.Runtime.ContainerStatus(cctx, c.Id)
		cancel()
		if err != nil {
			return err
		}
		states[name] = cri.ContainerState(s)
	}
	failed := false
	initDone := true
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		cur, have := byName[c.Name]
		if !have {
			initDone = false
			if err := m.startContainer(ctx, st, c, 0); err != nil {
				return err
			}
			break
		}
		s := states[c.Name]
		if s.Phase == cri.PhaseCreated {
			initDone = false
			if err := m.startCreated(ctx, st, cur); err != nil {
				return err
			}
			break
		}
		if s.Phase != cri.PhaseExited {
			initDone = false
			break
		}
		if s.ExitCode == 0 {
			continue
		}
		initDone = false
		if pod.Spec.RestartPolicy == corev1.RestartPolicyNever {
			failed = true
			break
		}
		if err := m.restart(ctx, st, c, cur, s); err != nil {
			return err
		}
		break
	}
	if initDone && !failed {
		for i := range pod.Spec.Containers {
			c := &pod.Spec.Containers[i]
			cur, have := byName[c.Name]
			if !have {
				if err := m.startContainer(ctx, st, c, 0); err != nil {
					return err
				}
				continue
			}
			s := states[c.Name]
			if s.Phase == cri.PhaseCreated {
				if err := m.startCreated(ctx, st, cur); err != nil {
					return err
				}
				continue
			}
			if s.Phase != cri.PhaseExited {
				continue
			}
			switch pod.Spec.RestartPolicy {
			case corev1.RestartPolicyNever:
				continue
			case corev1.RestartPolicyOnFailure:
				if s.ExitCode == 0 {
					continue
				}
			}
			if err := m.restart(ctx, st, c, cur, s); err != nil {
				return err
			}
		}
	}
	// Fresh view for the status.
	cctx, cancel = call(ctx)
	ctrs, err = m.cfg.Runtime.ListContainers(cctx, st.sandboxID, nil)
	cancel()
	if err != nil {
		return err
	}
	m.updateStatus(ctx, st, latest(ctrs), initDone, failed)
	m.gc(ctx, st.parent, ctrs)
	return nil
}

// startCreated starts a container that was created but never started: a
// nodeguard killed between CreateContainer and StartContainer leaves one
// behind. If it cannot start, it is removed, so that the next sync makes
// the attempt again.
func (m *Manager) startCreated(ctx context.Context, st *podState, c *runtimeapi.Container) error {
	cctx, cancel := call(ctx)
	defer cancel()
	if err := m.cfg.Runtime.StartContainer(cctx, c.Id); err != nil {
		m.log.Warn("start a created container; removing it", "pod", key(st.pod), "container", c.GetMetadata().GetName(), "err", err)
		return m.removeContainer(ctx, st.parent, c.Id)
	}
	m.log.Info("created container started", "pod", key(st.pod), "container", c.GetMetadata().GetName())
	return nil
}

// restart starts the next attempt of an exited container once its
// back-off has passed.
func (m *Manager) restart(ctx context.Context, st *podState, c *corev1.Container, cur *runtimeapi.Container, s cri.State) error {
	now := m.now()
	b := st.backoff[c.Name]
	if b == nil {
		// The first exit this agent sees is restarted at once, as the
		// kubelet does (its back-off entry is made by that restart): the
		// back-off is for a container that keeps failing. A nodeguard
		// killed mid-start leaves a container that failed to start
		// through no fault of its own, and its restart should not wait.
		st.backoff[c.Name] = &backoff{}
		m.log.Info("container restarting", "pod", key(st.pod), "container", c.Name, "exit_code", s.ExitCode, "reason", s.Reason)
		return m.startContainer(ctx, st, c, cur.GetMetadata().GetAttempt()+1)
	}
	if b.until.IsZero() {
		// A container that ran long enough starts over (the kubelet
		// resets after twice the maximum).
		if !s.StartedAt.IsZero() && s.FinishedAt.Sub(s.StartedAt) > 2*m.cfg.BackoffMax {
			b.delay = 0
		}
		switch {
		case b.delay == 0:
			b.delay = m.cfg.BackoffInitial
		default:
			b.delay = min(2*b.delay, m.cfg.BackoffMax)
		}
		b.until = s.FinishedAt.Add(b.delay)
		if s.FinishedAt.IsZero() {
			b.until = now.Add(b.delay)
		}
		m.log.Info("container back-off", "pod", key(st.pod), "container", c.Name, "exit_code", s.ExitCode, "reason", s.Reason, "delay", b.delay)
	}
	if now.Before(b.until) {
		m.mu.Lock()
		if st.evicted == nil {
			st.status.Reason = "CrashLoopBackOff"
		}
		m.mu.Unlock()
		return nil
	}
	b.until = time.Time{}
	return m.startContainer(ctx, st, c, cur.GetMetadata().GetAttempt()+1)
}

func (m *Manager) startContainer(ctx context.Context, st *podState, c *corev1.Container, attempt uint32) error {
	if m.isEvicted(st) {
		return nil // the next sync tears it down
	}
	cctx, cancel := call(ctx)
	defer cancel()
	image, err := m.ensureImage(cctx, st, c)
	if err != nil {
		return err
	}
	adj, err := qos.OOMScoreAdj(st.pod, c, m.cfg.MemoryCapacity)
	if err != nil {
		return err
	}
	if clamped, did := qos.ClampForCapability(adj, m.cfg.HasCapSysResource, m.cfg.MinOOMScoreAdj); did {
		m.clampedOnce.Do(func() {
			m.log.Warn("oom_score_adj clamped: no CAP_SYS_RESOURCE", "wanted", adj, "used", clamped, "min_allowed", m.cfg.MinOOMScoreAdj)
		})
		adj = clamped
	}
	ms, err := m.containerMounts(st, c)
	if err != nil {
		return err
	}
	cfg, err := cri.ContainerConfig(st.pod, c, cri.ContainerOptions{
		Image: image, Attempt: attempt, OOMScoreAdj: int64(adj), PodIP: st.ip,
		CgroupV2: m.cfg.CgroupV2, EnforceCPULimits: true, Mounts: ms,
	})
	if err != nil {
		return err
	}
	id, err := m.cfg.Runtime.CreateContainer(cctx, st.sandboxID, cfg, st.sandboxCfg)
	if err != nil {
		return err
	}
	if err := m.cfg.Runtime.StartContainer(cctx, id); err != nil {
		return err
	}
	m.log.Info("container started", "pod", key(st.pod), "container", c.Name, "attempt", attempt, "oom_score_adj", adj)
	return nil
}

// gc removes exited attempts older than the newest exited one of each
// container (the kubelet keeps one for logs and status).
func (m *Manager) gc(ctx context.Context, parent string, ctrs []*runtimeapi.Container) {
	newest := latest(ctrs)
	for _, c := range ctrs {
		n := c.GetMetadata().GetName()
		if c.State != runtimeapi.ContainerState_CONTAINER_EXITED || newest[n].Id == c.Id {
			continue
		}
		if newest[n].GetMetadata().GetAttempt() > c.GetMetadata().GetAttempt()+1 {
			if err := m.removeContainer(ctx, parent, c.Id); err != nil {
				m.log.Warn("remove old container", "container", c.Id, "err", err)
			}
		}
	}
}

func (m *Manager) updateStatus(ctx context.Context, st *podState, byName map[string]*runtimeapi.Container, initDone, failed bool) {
	pod := st.pod
	status := corev1.PodStatus{PodIP: st.ip, StartTime: &metav1.Time{Time: st.created}}
	if st.ip != "" {
		status.PodIPs = []corev1.PodIP{{IP: st.ip}}
	}
	conv := func(c *corev1.Container) corev1.ContainerStatus {
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image}
		ctr, ok := byName[c.Name]
		if !ok {
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
			return cs
		}
		cs.ContainerID = "containerd://" + ctr.Id
		cs.ImageID = ctr.ImageRef
		cs.RestartCount = int32(ctr.GetMetadata().GetAttempt())
		cctx, cancel := call(ctx)
		raw, err := m.cfg.Runtime.ContainerStatus(cctx, ctr.Id)
		cancel()
		if err != nil {
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "Unknown", Message: err.Error()}
			return cs
		}
		s := cri.ContainerState(raw)
		switch s.Phase {
		case cri.PhaseRunning:
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.Time{Time: s.StartedAt}}
			cs.Ready, cs.Started = true, ptr(true)
		case cri.PhaseExited:
			reason := s.Reason
			switch {
			case s.OOMKilled:
				reason = "OOMKilled"
			case s.ExitCode == 0:
				reason = "Completed"
			case reason == "" || reason == "OOMKilled":
				reason = "Error"
			}
			cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: s.ExitCode, Reason: reason, Message: s.Message,
				StartedAt: metav1.Time{Time: s.StartedAt}, FinishedAt: metav1.Time{Time: s.FinishedAt}, ContainerID: cs.ContainerID}
			if b := st.backoff[c.Name]; b != nil && !b.until.IsZero() {
				cs.LastTerminationState.Terminated = cs.State.Terminated
				cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
					Message: fmt.Sprintf("back-off %s restarting failed container %s", b.delay, c.Name)}}
			}
		default:
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
		}
		return cs
	}
	for i := range pod.Spec.InitContainers {
		status.InitContainerStatuses = append(status.InitContainerStatuses, conv(&pod.Spec.InitContainers[i]))
	}
	allStarted, anyRunning, allExited, allZero, allReady := true, false, true, true, true
	for i := range pod.Spec.Containers {
		cs := conv(&pod.Spec.Containers[i])
		status.ContainerStatuses = append(status.ContainerStatuses, cs)
		if cs.ContainerID == "" {
			allStarted = false
		}
		if cs.State.Running != nil {
			anyRunning = true
			allExited = false
		} else if t := cs.State.Terminated; t != nil {
			if t.ExitCode != 0 {
				allZero = false
			}
		} else {
			allExited = false
		}
		if !cs.Ready {
			allReady = false
		}
	}
	switch {
	case failed:
		status.Phase = corev1.PodFailed
	case !initDone || !allStarted:
		status.Phase = corev1.PodPending
	case allExited && pod.Spec.RestartPolicy != corev1.RestartPolicyAlways:
		if allZero {
			status.Phase = corev1.PodSucceeded
		} else if pod.Spec.RestartPolicy == corev1.RestartPolicyNever {
			status.Phase = corev1.PodFailed
		} else {
			status.Phase = corev1.PodRunning
		}
	case anyRunning || allExited:
		status.Phase = corev1.PodRunning
	default:
		status.Phase = corev1.PodPending
	}
	cond := func(t corev1.PodConditionType, ok bool) corev1.PodCondition {
		s := corev1.ConditionFalse
		if ok {
			s = corev1.ConditionTrue
		}
		return corev1.PodCondition{Type: t, Status: s}
	}
	status.Conditions = []corev1.PodCondition{
		cond(corev1.PodScheduled, true),
		cond(corev1.PodInitialized, initDone),
		cond(corev1.ContainersReady, allReady && initDone),
		cond(corev1.PodReady, allReady && initDone),
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if st.evicted != nil {
		return // evicted meanwhile: Failed, Evicted stays
	}
	if st.status.Reason == "CrashLoopBackOff" || st.lastErr == "" {
		status.Reason = ""
	}
	st.lastErr = ""
	st.status = status
}

func ptr[T any](v T) *T { return &v }

func (m *Manager) desired(uid types.UID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.pods[uid]
	return ok
}

func (m *Manager) isEvicted(st *podState) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return st.evicted != nil
}

// containerID finds the running (or newest) container of a pod.
func (m *Manager) containerID(ctx context.Context, namespace, name, container string) (string, error) {
	m.mu.Lock()
	var st *podState
	for _, s := range m.pods {
		if s.pod.Namespace == namespace && s.pod.Name == name {
			st = s
		}
	}
	sandboxID := ""
	if st != nil {
		sandboxID = st.sandboxID
	}
	m.mu.Unlock()
	if sandboxID == "" {
		return "", fmt.Errorf("%w: %s/%s", ErrNotFound, namespace, name)
	}
	if container == "" {
		container = st.pod.Spec.Containers[0].Name
	}
	cctx, cancel := call(ctx)
	defer cancel()
	ctrs, err := m.cfg.Runtime.ListContainers(cctx, sandboxID, nil)
	if err != nil {
		return "", err
	}
	c, ok := latest(ctrs)[container]
	if !ok {
		return "", fmt.Errorf("%w: %q in pod %s/%s", ErrContainerNotFound, container, namespace, name)
	}
	return c.Id, nil
}

// Exec runs cmd in a container and waits for it.
func (m *Manager) Exec(ctx context.Context, namespace, name, container string, cmd []string, timeout time.Duration) (cri.ExecResult, error) {
	id, err := m.containerID(ctx, namespace, name, container)
	if err != nil {
		return cri.ExecResult{}, err
	}
	return m.cfg.Runtime.ExecSync(ctx, id, cmd, timeout)
}

// Wait blocks until pred holds for the pod or ctx ends (tests, bench).
func (m *Manager) Wait(ctx context.Context, namespace, name string, pred func(*corev1.Pod, bool) bool) error {
	for {
		p, ok := m.Get(namespace, name)
		if pred(p, ok) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s/%s: %w", namespace, name, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}
