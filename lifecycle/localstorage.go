package lifecycle

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/nodeguard/nodeguard/eviction/localstorage"
	"github.com/nodeguard/nodeguard/evictionapi"
	"github.com/nodeguard/nodeguard/mounts"
	"github.com/nodeguard/nodeguard/qos"
)

// The kubelet's local-storage eviction signals (eviction/localstorage
// decides).
const (
	SignalEmptyDirFsLimit           = localstorage.SignalEmptyDirFsLimit
	SignalEphemeralPodFsLimit       = localstorage.SignalEphemeralPodFsLimit
	SignalEphemeralContainerFsLimit = localstorage.SignalEphemeralContainerFsLimit
)

const (
	// DefaultLocalStorageInterval is the kubelet's eviction-manager
	// period (evictionMonitoringPeriod, 10 s), at which it runs
	// localStorageEviction. A pass walks every disk-backed volume, so it
	// is not run more often: a write past a limit is caught within one
	// interval of being measured.
	DefaultLocalStorageInterval = 10 * time.Second
	// localStorageGrace is the kubelet's immediateEvictionGracePeriodSeconds
	// (1 s), which every local-storage eviction uses whatever the pod's
	// terminationGracePeriodSeconds: the pod gets SIGTERM and a second.
	localStorageGrace = time.Second
)

// LocalStorageConfig is the enforcement of local-storage limits, the
// kubelet's LocalStorageCapacityIsolation: a pod whose emptyDir holds more
// than its sizeLimit, whose ephemeral storage (disk-backed emptyDirs,
// writable layers, logs) is past the sum of its containers'
// ephemeral-storage limits, or one of whose containers (writable layer
// and logs) is past its own limit, is evicted. The zero value enforces.
type LocalStorageConfig struct {
	// Interval between two measurements of every pod's storage
	// (DefaultLocalStorageInterval when zero). Measuring always runs
	// (LatestStorage); enforcing unless Disabled.
	Interval time.Duration
	// Disabled measures but never evicts (eviction.disabled).
	Disabled bool
	// DryRun decides, logs and reports, but does not evict.
	DryRun bool
	// Exempt pods ("namespace/name") are never evicted (eviction.exempt).
	Exempt []string
	// Observer, when set, receives each decision as the eviction
	// manager's do (metrics, the event log). Its OnDecision must not
	// block.
	Observer interface {
		OnDecision(evictionapi.Decision, evictionapi.Timing)
	}
}

// checkLocalStorage is the local-storage decision (localstorage.Check)
// on a pod's measured storage.
func checkLocalStorage(pod *corev1.Pod, s *PodStorage) (localstorage.Violation, bool) {
	u := localstorage.Usage{EmptyDirs: map[string]uint64{}, Ephemeral: s.EphemeralBytes(), Containers: map[string]uint64{}}
	for _, v := range s.Volumes {
		if v.Plugin == mounts.PluginEmptyDir {
			u.EmptyDirs[v.Name] = v.Bytes
		}
	}
	for _, c := range s.Containers {
		u.Containers[c.Name] = c.RootfsBytes + c.LogsBytes
	}
	return localstorage.Check(pod, u)
}

// localStorage is the state of the local-storage passes.
type localStorage struct {
	exempt map[string]bool
	// running: one pass at a time (a pass walks volumes; a slow one
	// delays the next instead of overlapping it); last: when the last
	// one started (Run's goroutine only).
	running atomic.Bool
	last    time.Time

	// latest is the newest sample, for LatestStorage.
	mu     sync.Mutex
	latest []PodStorage
	taken  time.Time
	// reported holds, per pod, the last decision that was logged but not
	// carried out (dry run, a pod never evicted, a measurement error):
	// it is logged and reported once, not every pass.
	reported map[types.UID]string
}

func newLocalStorage(cfg LocalStorageConfig) *localStorage {
	ls := &localStorage{exempt: map[string]bool{}}
	for _, e := range cfg.Exempt {
		ls.exempt[e] = true
	}
	return ls
}

// LatestStorage returns the newest sample of every pod's ephemeral
// storage and when it was taken (nil before the first), so that readers
// (metrics) never walk a directory themselves. It is shared: read it,
// never modify it.
func (m *Manager) LatestStorage() ([]PodStorage, time.Time) {
	m.ls.mu.Lock()
	defer m.ls.mu.Unlock()
	return m.ls.latest, m.ls.taken
}

// maybeCheckLocalStorage starts a local-storage pass in the background
// every LocalStorageConfig.Interval, unless the previous one still runs.
func (m *Manager) maybeCheckLocalStorage(ctx context.Context, wg *sync.WaitGroup) {
	interval := m.cfg.LocalStorage.Interval
	if interval <= 0 {
		interval = DefaultLocalStorageInterval
	}
	if !m.ls.last.IsZero() && m.now().Sub(m.ls.last) < interval || !m.ls.running.CompareAndSwap(false, true) {
		return
	}
	m.ls.last = m.now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer m.ls.running.Store(false)
		m.checkLocalStorage(ctx)
	}()
}

// checkLocalStorage is one pass: every pod's storage is measured and the
// pods past a local-storage limit are evicted.
func (m *Manager) checkLocalStorage(ctx context.Context) {
	start := time.Now()
	sample, err := m.Storage(ctx)
	if err != nil {
		m.log.Warn("local storage: measure", "err", err)
		return
	}
	taken := m.now()
	m.ls.mu.Lock()
	m.ls.latest, m.ls.taken = sample, taken
	m.ls.mu.Unlock()
	m.log.Debug("local storage measured", "pods", len(sample), "took", time.Since(start))
	if m.cfg.LocalStorage.Disabled {
		return
	}
	seen := map[types.UID]bool{}
	for i := range sample {
		s := &sample[i]
		seen[s.UID] = true
		m.enforceLocalStorage(ctx, s, taken)
	}
	m.ls.mu.Lock()
	for uid := range m.ls.reported {
		if !seen[uid] {
			delete(m.ls.reported, uid)
		}
	}
	m.ls.mu.Unlock()
}

// enforceLocalStorage evicts one pod if it is past a local-storage limit.
// Only pods that run are judged (the kubelet's active pods): not one
// being deleted, evicted or finished, whose logs stay until deletion.
func (m *Manager) enforceLocalStorage(ctx context.Context, s *PodStorage, observedAt time.Time) {
	m.mu.Lock()
	st, ok := m.pods[s.UID]
	active := ok && !st.deleting && st.evicted == nil && st.sandboxID != "" &&
		st.status.Phase != corev1.PodSucceeded && st.status.Phase != corev1.PodFailed
	var pod *corev1.Pod
	var source string
	if active {
		pod, source = st.pod, st.source
	}
	m.mu.Unlock()
	if !active {
		return
	}
	if s.VolumesErr != nil {
		// The emptyDirs were not measured: their limits cannot be judged
		// and the pod's total is a lower bound (still acted upon when it
		// is past the limit already).
		m.reportOnce(s.UID, "measure: "+s.VolumesErr.Error(), func() {
			m.log.Warn("local storage: volumes not measured; their sizeLimits are not enforced until they are", "pod", key(pod), "err", s.VolumesErr)
		})
	}
	v, over := checkLocalStorage(pod, s)
	if !over {
		return
	}
	req := qos.PodRequests(pod)[corev1.ResourceEphemeralStorage]
	victim := evictionapi.Pod{
		UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name, QOS: qos.Class(pod), Priority: qos.Priority(pod),
		Critical: qos.IsCritical(pod), Static: staticSource(source), Exempt: m.ls.exempt[key(pod)],
		EphemeralRequest: req.Value(), EphemeralUsage: int64(s.EphemeralBytes()),
		GracePeriod: grace(pod),
	}
	d := evictionapi.Decision{
		Time: m.now(), ObservedAt: observedAt, Signal: v.Signal, Threshold: v.Threshold, Observed: float64(v.Used),
		Resource: evictionapi.ResourceDisk, GracePeriod: localStorageGrace, Victim: victim, DryRun: m.cfg.LocalStorage.DryRun,
		Message: v.Message,
	}
	if !victim.Evictable() {
		// The kubelet's evictPod refuses critical pods, static ones
		// among them, as the eviction policy does (evictionapi.Pod.Evictable).
		m.reportOnce(pod.UID, "spared: "+v.Message, func() {
			m.log.Warn("local storage limit exceeded; not evicting a critical, static or exempt pod", "pod", key(pod),
				"signal", v.Signal, "threshold", v.Threshold, "observed", v.Used, "critical", victim.Critical,
				"static", victim.Static, "exempt", victim.Exempt)
		})
		return
	}
	t := evictionapi.Timing{Decided: m.now()}
	if d.DryRun {
		m.reportOnce(pod.UID, "dry run: "+v.Message, func() {
			m.logLocalStorageEviction(d, t)
			m.observeLocalStorage(d, t)
		})
		return
	}
	ectx, cancel := context.WithTimeout(ctx, callTimeout)
	t.Err = (&EvictionActor{m: m}).Evict(ectx, d)
	cancel()
	t.KillSent = m.now()
	m.logLocalStorageEviction(d, t)
	m.observeLocalStorage(d, t)
}

// logLocalStorageEviction is the decision's one structured line, with the
// eviction manager's keys.
func (m *Manager) logLocalStorageEviction(d evictionapi.Decision, t evictionapi.Timing) {
	attrs := []any{
		"signal", d.Signal, "threshold", d.Threshold, "observed", d.Observed,
		"victim", d.Victim.Namespace + "/" + d.Victim.Name, "uid", string(d.Victim.UID),
		"rank", 0, "hard", false, "grace", d.GracePeriod, "dry_run", d.DryRun, "resource", string(d.Resource),
		"staleness", d.Time.Sub(d.ObservedAt), "kill_latency", t.Kill(), "message", d.Message,
	}
	if t.Err != nil {
		m.log.Warn("local-storage eviction failed", append(attrs, "err", t.Err)...)
		return
	}
	m.log.Info("evict pod", attrs...)
}

func (m *Manager) observeLocalStorage(d evictionapi.Decision, t evictionapi.Timing) {
	if o := m.cfg.LocalStorage.Observer; o != nil {
		o.OnDecision(d, t)
	}
}

// reportOnce runs report unless what was the last thing reported for uid.
func (m *Manager) reportOnce(uid types.UID, what string, report func()) {
	m.ls.mu.Lock()
	if m.ls.reported == nil {
		m.ls.reported = map[types.UID]string{}
	}
	again := m.ls.reported[uid] == what
	m.ls.reported[uid] = what
	m.ls.mu.Unlock()
	if !again {
		report()
	}
}

// unenforcedLocalStorage warns, at admission, about the local-storage
// limits of a pod that will never be evicted for them (see
// enforceLocalStorage): they stay accepted, as the kubelet accepts them,
// but not silently. A memory emptyDir's sizeLimit is honoured anyway (it
// sizes the tmpfs).
func (m *Manager) unenforcedLocalStorage(p *corev1.Pod, source string) []string {
	why := ""
	switch {
	case m.cfg.LocalStorage.Disabled:
		why = "eviction is disabled"
	case qos.IsCritical(p):
		why = "critical pods are never evicted"
	case staticSource(source):
		why = "static pods (from the manifest directory) are never evicted, as by the kubelet"
	case m.ls.exempt[key(p)]:
		why = "the pod is exempt from eviction"
	default:
		return nil
	}
	var out []string
	for i, v := range p.Spec.Volumes {
		if e := v.EmptyDir; e != nil && e.Medium != corev1.StorageMediumMemory && e.SizeLimit != nil && e.SizeLimit.Sign() == 1 {
			out = append(out, field.NewPath("spec", "volumes").Index(i).Child("emptyDir", "sizeLimit").String()+": not enforced: "+why)
		}
	}
	for i, c := range p.Spec.Containers {
		if _, ok := c.Resources.Limits[corev1.ResourceEphemeralStorage]; ok {
			out = append(out, field.NewPath("spec", "containers").Index(i).Child("resources", "limits").Key(string(corev1.ResourceEphemeralStorage)).String()+
				": not enforced: "+why)
		}
	}
	return out
}
