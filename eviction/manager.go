package eviction

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/cgroups/cgstat"
	"github.com/nodeguard/nodeguard/loader/event"
	"github.com/nodeguard/nodeguard/pressure"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// Defaults of ManagerConfig.
const (
	// DefaultTick is the safety tick: an evaluation at least this often
	// when nothing wakes the manager (the kubelet polls every 10 s).
	DefaultTick = time.Second
	// DefaultMinInterval bounds the evaluation rate under a storm of
	// wake-ups (reclaim events arrive by the thousand per second under
	// pressure): at most 100 snapshots a second, each a few milliseconds
	// on a 2-core node, leaves the node most of its CPU.
	DefaultMinInterval = 10 * time.Millisecond
	// DefaultEvictTimeout bounds one Actor.Evict call, which returns once
	// the kill is sent or the stop requested (not after the grace period).
	DefaultEvictTimeout = 10 * time.Second
	// DefaultReleaseTimeout: a victim not seen releasing its memory by
	// then is logged and no longer tracked.
	DefaultReleaseTimeout = 2 * time.Minute
	// DefaultStallWindow is how far back reclaim events count towards a
	// pod's ReclaimStall: the shortest PSI window, so that the tie-break
	// reflects current pressure.
	DefaultStallWindow = 10 * time.Second
	// ReleasedFraction: a victim whose working set fell below this share
	// of its usage at decision time has released its memory (what is
	// left is page cache and kernel memory being uncharged).
	ReleasedFraction = 0.10
	// stallRing bounds the reclaim samples kept between evaluations.
	stallRing = 4096
)

// ManagerConfig configures a Manager.
type ManagerConfig struct {
	Policy PolicyConfig
	Actor  Actor
	// Snapshot returns a FRESH snapshot, read when called (not a cached
	// one): every decision is confirmed on it.
	Snapshot func(ctx context.Context) (*pressure.Snapshot, error)
	// SnapshotCalm, when set, returns a fresh snapshot in which the pods'
	// own cgroups may carry a reading a few seconds old (the sensor's
	// FreshCalm). A tick's evaluation takes it while the last evaluation
	// was calm (Policy.Calm): the node's figures in it are fresh, and
	// when they are not calm any more the manager takes Snapshot before
	// it evaluates. Wake-ups always take Snapshot.
	SnapshotCalm func(ctx context.Context) (*pressure.Snapshot, error)
	// Tick: see DefaultTick (the default when 0).
	Tick time.Duration
	// MinInterval: see DefaultMinInterval (the default when 0; negative
	// disables the bound).
	MinInterval time.Duration
	// EvictTimeout, ReleaseTimeout, StallWindow: see their defaults.
	EvictTimeout, ReleaseTimeout, StallWindow time.Duration
	// DryRun: decide and log, but neither evict nor change oom_score_adj.
	// It sets Policy.DryRun.
	DryRun   bool
	Logger   *slog.Logger
	Now      func() time.Time
	Observer Observer
	// Watch, when set, asks the snapshot's source to read a pod cgroup
	// it does not know yet (its birth event lost to a full ring, or not
	// read yet). A pod without stats ranks first, as the kubelet ranks
	// it, so before deciding on a snapshot that lacks a pod's cgroup the
	// manager watches it and takes the snapshot again, once per cgroup.
	Watch func(cgroupRel string)
	// Reclaim, when set, frees node-level resources for a disk decision
	// before it is carried out; the decision is dropped when a fresh
	// snapshot then meets no disk threshold (reclaim.go).
	Reclaim NodeReclaimer
}

// Manager runs the Policy: it wakes on Wake, kernel events and a safety
// tick, takes a fresh snapshot, evaluates, and acts through the Actor.
type Manager struct {
	cfg    ManagerConfig
	policy *Policy
	log    *slog.Logger
	now    func() time.Time
	obs    Observer

	wake    chan struct{}
	wmu     sync.Mutex
	wakeAt  time.Time // earliest pending evidence
	wakeWhy string
	wakeN   int

	watched map[string]bool // cgroups handed to Watch (loop only)
	// released are victims whose release was seen, for as long as the
	// actor still lists them (loop only): never observed, so never
	// chosen again.
	released map[types.UID]bool

	mu       sync.Mutex
	inflight map[types.UID]bool
	tracking map[types.UID]*tracked
	told     map[types.UID]time.Time // Released calls
	stalls   []stallSample
	stallPos int

	view atomic.Pointer[view]

	// loop-only state
	raised      types.UID // the pod whose oom_score_adj is raised
	raiseFailed bool      // its last raise failed, perhaps in part: raise it again
	conds       map[Condition]bool
	snapErrAt   time.Time
	lastReclaim time.Time // the last node-level reclaim that did not suffice
	running     atomic.Bool
	evaluations atomic.Uint64
	// calm: the last evaluation found the node calm (calmNow), so a
	// tick may take SnapshotCalm; calmLeft counts the calm snapshots
	// taken again whole.
	calm     bool
	calmLeft atomic.Uint64
	wg       sync.WaitGroup
}

// tracked is a victim whose release the manager waits for.
type tracked struct {
	d   Decision
	t   Timing
	rel string // its pod cgroup
}

// stallSample is one reclaim episode of a memory cgroup.
type stallSample struct {
	memcg uint64
	at    time.Time
	dur   time.Duration
}

// view is what the event goroutine needs from the last evaluation.
type view struct {
	byID      map[uint64]string // memory-hierarchy cgroup id -> Rel
	byUnified map[uint64]string // cgroup2 id -> Rel
	hier      map[uint64]uint32 // memory cgroup id -> its hierarchy
	pods      []PodRef
}

// NewManager checks cfg and builds a Manager.
func NewManager(cfg ManagerConfig) (*Manager, error) {
	if cfg.Actor == nil {
		return nil, fmt.Errorf("new manager: actor: %w: not set", ErrInvalid)
	}
	if cfg.Snapshot == nil {
		return nil, fmt.Errorf("new manager: snapshot: %w: not set", ErrInvalid)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"tick", cfg.Tick}, {"evictTimeout", cfg.EvictTimeout}, {"releaseTimeout", cfg.ReleaseTimeout}, {"stallWindow", cfg.StallWindow}} {
		if d.v < 0 {
			return nil, fmt.Errorf("new manager: %s: %w: %v is negative", d.name, ErrInvalid, d.v)
		}
	}
	if cfg.Tick == 0 {
		cfg.Tick = DefaultTick
	}
	if cfg.MinInterval == 0 {
		cfg.MinInterval = DefaultMinInterval
	}
	if cfg.EvictTimeout == 0 {
		cfg.EvictTimeout = DefaultEvictTimeout
	}
	if cfg.ReleaseTimeout == 0 {
		cfg.ReleaseTimeout = DefaultReleaseTimeout
	}
	if cfg.StallWindow == 0 {
		cfg.StallWindow = DefaultStallWindow
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Observer == nil {
		cfg.Observer = NopObserver{}
	}
	if cfg.DryRun || cfg.Policy.DryRun {
		cfg.DryRun, cfg.Policy.DryRun = true, true
	}
	pol, err := NewPolicy(cfg.Policy)
	if err != nil {
		return nil, fmt.Errorf("new manager: %w", err)
	}
	return &Manager{
		cfg: cfg, policy: pol, log: cfg.Logger, now: cfg.Now, obs: cfg.Observer,
		wake:     make(chan struct{}, 1),
		inflight: map[types.UID]bool{},
		tracking: map[types.UID]*tracked{},
		told:     map[types.UID]time.Time{},
	}, nil
}

// Policy returns the manager's policy (for Admit).
func (m *Manager) Policy() *Policy { return m.policy }

// Evaluations is the number of evaluations so far.
func (m *Manager) Evaluations() uint64 { return m.evaluations.Load() }

// Wake asks for an evaluation on a fresh snapshot; at is the time of the
// evidence (a tripwire's crossing), which becomes Timing.Crossed of the
// decisions it leads to. It never blocks and is safe from any goroutine:
// wake-ups that arrive before the loop takes them coalesce into one, which
// keeps the earliest time.
func (m *Manager) Wake(reason string, at time.Time) {
	m.wmu.Lock()
	if !at.IsZero() && (m.wakeAt.IsZero() || at.Before(m.wakeAt)) {
		m.wakeAt, m.wakeWhy = at, reason
	}
	if m.wakeWhy == "" {
		m.wakeWhy = reason
	}
	m.wakeN++
	m.wmu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// evidence reports whether the pending wake-up carries the time of a
// crossing (a tripwire's or a PSI trigger's): such a wake-up is evaluated
// at once, not held off by MinInterval. Those sources limit themselves (a
// tripwire fires once per arming, the working-set poll at most every 20
// ms, a PSI trigger once per window); the storms MinInterval is for are
// reclaim events and releases, which carry no time.
func (m *Manager) evidence() bool {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	return !m.wakeAt.IsZero()
}

// holdOff waits d, or less when a wake-up with evidence arrives; false
// when ctx ended.
func (m *Manager) holdOff(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		case <-m.wake:
			if m.evidence() {
				return true
			}
		}
	}
}

// takeWake returns and clears the pending wake-up.
func (m *Manager) takeWake() (at time.Time, why string, n int) {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	at, why, n = m.wakeAt, m.wakeWhy, m.wakeN
	m.wakeAt, m.wakeWhy, m.wakeN = time.Time{}, "", 0
	return at, why, n
}

// Released tells the manager that an evicted pod's memory was released
// (its cgroup removed, say) at the given time. Safe from any goroutine.
func (m *Manager) Released(uid types.UID, at time.Time) {
	m.mu.Lock()
	if _, ok := m.tracking[uid]; ok {
		m.told[uid] = at
	}
	m.mu.Unlock()
	m.policy.Released(uid)
	m.Wake("released", time.Time{})
}

// Run evaluates on every wake-up and tick until ctx is done, then waits
// for soft evictions in progress and puts back a raised oom_score_adj.
// It returns nil when ctx ends; a second concurrent Run is an error.
func (m *Manager) Run(ctx context.Context) error {
	if !m.running.CompareAndSwap(false, true) {
		return errors.New("eviction manager: already running")
	}
	defer m.running.Store(false)
	t := time.NewTicker(m.cfg.Tick)
	defer t.Stop()
	defer m.wg.Wait()
	defer m.restoreOnExit()
	m.evaluate(ctx)
	for {
		last := time.Now()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-m.wake:
			if d := m.cfg.MinInterval - time.Since(last); d > 0 && !m.evidence() {
				if !m.holdOff(ctx, d) {
					return nil
				}
			}
		}
		m.evaluate(ctx)
	}
}

// restoreOnExit puts back the oom_score_adj raised by this manager.
func (m *Manager) restoreOnExit() {
	if m.raised == "" || m.cfg.DryRun {
		return
	}
	if err := m.cfg.Actor.RestoreOOMScoreAdj(m.raised); err != nil {
		m.log.Warn("restore oom_score_adj on exit", "uid", m.raised, "err", err)
	}
	m.raised = ""
}

// evaluate is one pass: snapshot, observations, policy, actions.
func (m *Manager) evaluate(ctx context.Context) {
	detected := m.now()
	wakeAt, why, wakes := m.takeWake()
	take := m.cfg.Snapshot
	calm := m.calm && wakes == 0 && m.cfg.SnapshotCalm != nil
	if calm {
		take = m.cfg.SnapshotCalm
	}
	snap, err := take(ctx)
	snapshotted := m.now()
	if err != nil || snap == nil {
		if err == nil {
			err = errors.New("no snapshot")
		}
		// Logged at most every 10 s: the loop may retry at 100 Hz.
		if detected.Sub(m.snapErrAt) >= 10*time.Second {
			m.snapErrAt = detected
			m.log.Warn("eviction manager: snapshot failed, not evaluating", "err", err)
		}
		return
	}
	// Counted once the evaluation has acted (oom_score_adj, hard
	// evictions): Evaluations() > n then means "evaluated and done".
	defer m.evaluations.Add(1)
	refs := m.cfg.Actor.Pods(calm)
	if calm {
		// The node's figures are fresh in a calm snapshot: when they are
		// calm no more, every decision and the next victim are made on a
		// whole fresh snapshot instead, and the pods listed whole.
		if !m.calmNow(nodeObservations(snap)) {
			m.calmLeft.Add(1)
			full, err := m.cfg.Snapshot(ctx)
			if err != nil || full == nil {
				// Never decide on the calm snapshot's pod figures: the
				// next evaluation takes a whole one.
				m.calm = false
				m.evaluations.Add(1)
				return
			}
			snap, snapshotted = full, m.now()
			refs = m.cfg.Actor.Pods(false)
		}
	}
	if m.watchUnseen(snap, refs) {
		if again, err := m.cfg.Snapshot(ctx); err == nil && again != nil {
			snap = again
		}
	}
	// Releases before observing: a victim released in this snapshot is
	// no longer pending in the policy, and observed it would be a
	// candidate again (a hard threshold would "escalate" a pod already
	// evicted).
	m.checkReleases(snap, refs)
	obs, v := m.observe(snap, refs)
	m.view.Store(v)
	now := m.now()
	m.obs.OnStaleness(now.Sub(snap.Time))

	res := m.policy.Evaluate(obs, now)
	decided := m.now()

	// The decisions first: a hard eviction's kill is the one thing on
	// the path to released memory. Raising the next victim's
	// oom_score_adj (which may first put back the previous one's,
	// through the runtime) and the condition observers come after it.
	crossed := snap.Time
	if !wakeAt.IsZero() && wakeAt.Before(crossed) {
		crossed = wakeAt
	}
	for _, d := range res.Decisions {
		if m.reclaimFirst(ctx, d) {
			continue
		}
		tm := Timing{Crossed: crossed, Detected: detected, Decided: decided, Snapshotted: snapshotted, SnapshotRead: snap.Took}
		m.act(ctx, d, tm, why, wakes)
	}

	m.calm = m.calmNow(obs)
	if m.conds == nil || !maps.Equal(m.conds, res.Conditions) {
		m.conds = res.Conditions
		m.obs.OnConditions(maps.Clone(res.Conditions))
	}
	m.oomScoreAdj(res.NextVictim)
}

// watchUnseen hands Watch the cgroups of pods that snap lacks and that it
// was not handed before, and reports whether there were any: the caller
// then takes the snapshot again. A cgroup seen in a snapshot, or of a pod
// gone, is forgotten, so that it may be watched again.
func (m *Manager) watchUnseen(snap *pressure.Snapshot, refs []PodRef) bool {
	if m.cfg.Watch == nil {
		return false
	}
	if m.watched == nil {
		m.watched = map[string]bool{}
	}
	seen := make(map[string]bool, len(snap.Cgroups))
	for i := range snap.Cgroups {
		seen[snap.Cgroups[i].Rel] = true
	}
	wanted := make(map[string]bool, len(refs))
	fresh := false
	for _, ref := range refs {
		rel := ref.CgroupRel
		if rel == "" {
			continue
		}
		wanted[rel] = true
		if !seen[rel] && !m.watched[rel] {
			m.watched[rel] = true
			m.cfg.Watch(rel)
			fresh = true
		}
	}
	for rel := range m.watched {
		if seen[rel] || !wanted[rel] {
			delete(m.watched, rel)
		}
	}
	return fresh
}

// nodeObservations are snap's node-level observations alone (signals and
// node PSI), what Policy.Calm looks at.
func nodeObservations(snap *pressure.Snapshot) Observations {
	obs := Observations{Time: snap.Time, Signals: make(map[nodestats.Signal]nodestats.Observation, len(snap.Signals)), NodePSI: snap.Node.PSI}
	for _, o := range snap.Signals {
		obs.Signals[o.Signal] = o
	}
	return obs
}

// observe joins the actor's pods to the snapshot's cgroups, leaving out
// victims already released.
func (m *Manager) observe(snap *pressure.Snapshot, refs []PodRef) (Observations, *view) {
	obs := nodeObservations(snap)
	obs.Pods = make([]Pod, 0, len(refs))
	v := &view{
		byID:      make(map[uint64]string, len(snap.Cgroups)),
		byUnified: make(map[uint64]string, len(snap.Cgroups)),
		hier:      make(map[uint64]uint32, len(snap.Cgroups)),
		pods:      refs,
	}
	byRel := make(map[string]*pressure.Cgroup, len(snap.Cgroups))
	for i := range snap.Cgroups {
		c := &snap.Cgroups[i]
		byRel[c.Rel] = c
		v.byID[c.Key.ID] = c.Rel
		v.hier[c.Key.ID] = c.Key.HierarchyID
		if c.UnifiedID != 0 {
			v.byUnified[c.UnifiedID] = c.Rel
		}
	}
	listed := make(map[types.UID]bool, len(refs))
	for _, r := range refs {
		listed[r.UID] = true
	}
	for uid := range m.released {
		if !listed[uid] {
			delete(m.released, uid)
		}
	}
	stall := m.stallByRel(v, snap.Time)
	for _, ref := range refs {
		if m.released[ref.UID] {
			continue
		}
		p := ref.Pod
		c, ok := byRel[ref.CgroupRel]
		if !ok || c.Err != nil {
			// No reading: the kubelet's "no stats" pod.
			p.UsageUnknown, p.MemoryUsage = true, 0
		} else {
			p.UsageUnknown = false
			p.MemoryUsage = int64(c.Memory.WorkingSet())
			p.CgroupID = c.Key.ID // the memory hierarchy's, as read
			p.PSI, p.HasPSI = c.Memory.PSI, c.Memory.Fields.Has(cgstat.FieldPSI)
			p.CPUPSI, p.HasCPUPSI = c.CPU, c.HasCPU
			p.IOPSI, p.HasIOPSI = c.IO, c.HasIO
		}
		if p.ReclaimStall == 0 && ref.CgroupRel != "" {
			for rel, d := range stall {
				if beneath(rel, ref.CgroupRel) {
					p.ReclaimStall += d
				}
			}
		}
		obs.Pods = append(obs.Pods, p)
	}
	// A victim the actor no longer lists (it may drop a pod once its
	// eviction starts) stays in the observations while its cgroup
	// exists: its memory is still to be released, and the policy counts
	// it as pending only while it sees the pod.
	m.mu.Lock()
	if len(m.inflight) > 0 {
		obs.InFlight = maps.Clone(m.inflight)
	}
	for uid, tr := range m.tracking {
		c, ok := byRel[tr.rel]
		if listed[uid] || tr.rel == "" || !ok {
			continue
		}
		p := tr.d.Victim
		p.UsageUnknown = c.Err != nil
		if c.Err == nil {
			p.MemoryUsage = int64(c.Memory.WorkingSet())
		}
		obs.Pods = append(obs.Pods, p)
		v.pods = append(v.pods, PodRef{Pod: p, CgroupRel: tr.rel})
	}
	m.mu.Unlock()
	return obs, v
}

// beneath reports whether rel is dir or below it.
func beneath(rel, dir string) bool {
	return rel == dir || strings.HasPrefix(rel, strings.TrimSuffix(dir, "/")+"/")
}

// stallByRel sums the reclaim stall of the last StallWindow per cgroup.
func (m *Manager) stallByRel(v *view, now time.Time) map[string]time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]time.Duration{}
	for _, s := range m.stalls {
		if s.memcg == 0 || now.Sub(s.at) > m.cfg.StallWindow {
			continue
		}
		if rel, ok := v.byID[s.memcg]; ok {
			out[rel] += s.dur
		}
	}
	return out
}

// act carries out one decision.
func (m *Manager) act(ctx context.Context, d Decision, tm Timing, why string, wakes int) {
	if d.DryRun {
		m.logDecision(d, tm, why, wakes)
		m.obs.OnDecision(d, tm)
		return
	}
	rel := ""
	if v := m.view.Load(); v != nil {
		for _, r := range v.pods {
			if r.UID == d.Victim.UID {
				rel = r.CgroupRel
			}
		}
	}
	// Tracked from the decision on, so that a victim the actor stops
	// listing as soon as its eviction starts still counts as pending.
	tr := &tracked{d: d, t: tm, rel: rel}
	m.mu.Lock()
	m.inflight[d.Victim.UID] = true
	m.tracking[d.Victim.UID] = tr
	m.mu.Unlock()
	evict := func() {
		ectx, cancel := context.WithTimeout(ctx, m.cfg.EvictTimeout)
		err := m.cfg.Actor.Evict(ectx, d)
		cancel()
		m.mu.Lock()
		tr.t.KillSent, tr.t.Err = m.now(), err
		tm := tr.t
		delete(m.inflight, d.Victim.UID)
		if err != nil && m.tracking[d.Victim.UID] == tr {
			delete(m.tracking, d.Victim.UID)
		}
		m.mu.Unlock()
		if err != nil {
			// Not evicted: forget the decision so that the next
			// evaluation decides again (and retries this pod if it is
			// still the one to evict).
			m.policy.Forget(d.Victim.UID)
		}
		m.logDecision(d, tm, why, wakes)
		m.obs.OnDecision(d, tm)
		if err != nil && !errors.Is(err, ErrEvictionRefused) {
			m.Wake("evict failed", time.Time{})
		}
	}
	if d.Hard {
		evict() // up to "kill sent": the loop waits for it
		return
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		evict()
	}()
}

// logDecision writes the one line of a decision.
func (m *Manager) logDecision(d Decision, tm Timing, why string, wakes int) {
	attrs := []any{
		"signal", d.Signal, "threshold", d.Threshold, "observed", d.Observed,
		"victim", d.Victim.Namespace + "/" + d.Victim.Name, "uid", string(d.Victim.UID),
		"rank", d.Rank, "hard", d.Hard, "grace", d.GracePeriod, "dry_run", d.DryRun,
		"resource", string(d.Resource), "usage", d.Victim.MemoryUsage,
		"wake", why, "wakes", wakes,
		"staleness", d.Staleness(),
		"detect_latency", tm.Detect(), "decide_latency", tm.Decide(),
		"snapshot_latency", tm.SnapshotWait(), "snapshot_read", tm.SnapshotRead, "kill_latency", tm.Kill(),
		"total_latency", tm.Total(),
	}
	if tm.Err != nil {
		m.log.Warn("eviction failed, retrying at the next evaluation", append(attrs, "err", tm.Err)...)
		return
	}
	m.log.Info("evict pod", attrs...)
}

// checkReleases sees which victims released their memory in snap. It
// runs before observe, which leaves them out from then on.
func (m *Manager) checkReleases(snap *pressure.Snapshot, refs []PodRef) {
	listed := make(map[types.UID]bool, len(refs))
	for _, r := range refs {
		listed[r.UID] = true
	}
	byRel := make(map[string]*pressure.Cgroup, len(snap.Cgroups))
	for i := range snap.Cgroups {
		byRel[snap.Cgroups[i].Rel] = &snap.Cgroups[i]
	}
	type done struct {
		tr *tracked
		at time.Time
	}
	var released, expired []*tracked
	var dones []done
	m.mu.Lock()
	for uid, tr := range m.tracking {
		if tr.t.KillSent.IsZero() {
			continue // Evict has not returned yet
		}
		at, told := m.told[uid]
		c, present := byRel[tr.rel]
		// A pod without a cgroup reading at decision time can only be
		// seen gone from the actor's list.
		watchCgroup := tr.rel != "" && !tr.d.Victim.UsageUnknown
		switch {
		case told:
		case watchCgroup && !present, !watchCgroup && !listed[uid]:
			at = snap.Time
		case watchCgroup && c.Err == nil && tr.d.Resource == ResourceMemory &&
			float64(c.Memory.WorkingSet()) < ReleasedFraction*float64(tr.d.Victim.MemoryUsage):
			at = snap.Time
		default:
			if snap.Time.Sub(tr.d.Time) > m.cfg.ReleaseTimeout {
				expired = append(expired, tr)
				delete(m.tracking, uid)
			}
			continue
		}
		delete(m.tracking, uid)
		delete(m.told, uid)
		tr.t.Released = at
		dones = append(dones, done{tr, at})
	}
	m.mu.Unlock()
	for _, dn := range dones {
		released = append(released, dn.tr)
	}
	for _, tr := range released {
		if listed[tr.d.Victim.UID] {
			if m.released == nil {
				m.released = map[types.UID]bool{}
			}
			m.released[tr.d.Victim.UID] = true
		}
		m.policy.Released(tr.d.Victim.UID)
		m.log.Info("victim released its memory",
			"victim", tr.d.Victim.Namespace+"/"+tr.d.Victim.Name, "uid", string(tr.d.Victim.UID),
			"signal", tr.d.Signal, "release_latency", tr.t.Release(), "total_latency", tr.t.Total())
		m.obs.OnReleased(tr.d, tr.t)
	}
	for _, tr := range expired {
		m.log.Warn("victim did not release its memory",
			"victim", tr.d.Victim.Namespace+"/"+tr.d.Victim.Name, "uid", string(tr.d.Victim.UID),
			"signal", tr.d.Signal, "waited", m.cfg.ReleaseTimeout)
	}
}

// oomScoreAdj raises the next victim's oom_score_adj and puts back the
// previous one's, once per change. A raise that failed may have raised
// some of the pod's processes: the pod counts as raised (put back when
// the next victim changes), and is raised again at the next evaluation.
func (m *Manager) oomScoreAdj(next *Pod) {
	var want types.UID
	if next != nil {
		want = next.UID
	}
	if want == m.raised && !m.raiseFailed {
		return
	}
	if m.raised != "" && m.raised != want {
		if !m.cfg.DryRun {
			if err := m.cfg.Actor.RestoreOOMScoreAdj(m.raised); err != nil {
				m.log.Warn("restore oom_score_adj", "uid", string(m.raised), "err", err)
			}
		}
		m.log.Info("restore oom_score_adj", "uid", string(m.raised), "dry_run", m.cfg.DryRun)
		m.raised = ""
	}
	m.raiseFailed = false
	if next == nil {
		return
	}
	if !m.cfg.DryRun {
		if err := m.cfg.Actor.SetOOMScoreAdj(next.UID, NextVictimOOMScoreAdj); err != nil {
			m.raised, m.raiseFailed = next.UID, true
			m.log.Warn("raise oom_score_adj of the next victim", "victim", next.Namespace+"/"+next.Name,
				"uid", string(next.UID), "err", err)
			return
		}
	}
	m.raised = next.UID
	m.log.Info("raise oom_score_adj of the next victim", "victim", next.Namespace+"/"+next.Name,
		"uid", string(next.UID), "oom_score_adj", NextVictimOOMScoreAdj, "rank", 0,
		"usage", next.MemoryUsage, "dry_run", m.cfg.DryRun)
}

// Events feeds kernel events to the manager until ctx is done or ch is
// closed: an OOM kill is attributed to a pod (Observer.OnOOMKill) and
// wakes the manager; a reclaim episode in a monitored cgroup wakes it and
// counts towards its pod's ReclaimStall; the removal of an evicted pod's
// cgroup marks its memory released. Other events are ignored. It never
// logs per event, except for OOM kills.
func (m *Manager) Events(ctx context.Context, ch <-chan event.Event) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-ch:
			if !ok {
				return
			}
			m.handle(ev)
		}
	}
}

func (m *Manager) handle(ev event.Event) {
	at := m.now()
	switch e := ev.(type) {
	case *event.OOMKill:
		a := m.Attribute(e, at)
		pod := ""
		if a.Pod != nil {
			pod = a.Pod.Namespace + "/" + a.Pod.Name
		}
		m.log.Info("kernel oom kill", "pod", pod, "container", a.Container, "cgroup", a.Cgroup,
			"pid", a.PID, "comm", a.Comm, "rss_bytes", e.RSSBytes(), "oom_score_adj", e.OOMScoreAdj)
		m.obs.OnOOMKill(a)
		m.Wake("oom_kill", at)
	case *event.Reclaim:
		v := m.view.Load()
		if v == nil || e.MemcgID == 0 {
			return
		}
		if _, ok := v.byID[e.MemcgID]; !ok {
			return // outside the monitored subtrees (or kswapd)
		}
		m.mu.Lock()
		s := stallSample{memcg: e.MemcgID, at: at, dur: time.Duration(e.DurationNS)}
		if len(m.stalls) < stallRing {
			m.stalls = append(m.stalls, s)
		} else {
			m.stalls[m.stallPos] = s
			m.stallPos = (m.stallPos + 1) % stallRing
		}
		m.mu.Unlock()
		m.Wake("reclaim", at)
	case *event.Cgroup:
		if e.Kind != event.KindCgroupRmdir {
			return
		}
		path := "/" + strings.TrimPrefix(e.Path, "/")
		var uid types.UID
		m.mu.Lock()
		for u, tr := range m.tracking {
			if tr.rel != "" && tr.rel == path {
				uid = u
			}
		}
		m.mu.Unlock()
		if uid != "" {
			m.Released(uid, at)
		}
	}
}

// Attribute traces an OOM kill to a pod through the last snapshot's
// cgroups: the victim's memory cgroup (by id in its hierarchy, else its
// cgroup2 id) is found, and the pod whose cgroup holds it.
func (m *Manager) Attribute(e *event.OOMKill, at time.Time) OOMKillAttribution {
	a := OOMKillAttribution{PID: e.PID, Comm: e.Comm, Time: at, Event: e}
	v := m.view.Load()
	if v == nil {
		return a
	}
	rel, ok := "", false
	if e.MemcgID != 0 {
		if h, known := v.hier[e.MemcgID]; known && h == e.MemcgHierarchy {
			rel, ok = v.byID[e.MemcgID], true
		}
	}
	if !ok && e.CgroupID != 0 {
		rel, ok = v.byUnified[e.CgroupID]
	}
	if !ok {
		// Not in the snapshot (a cgroup born since): the pod cgroup's
		// own id is known to the lifecycle.
		for i := range v.pods {
			if id := v.pods[i].CgroupID; id != 0 && (id == e.MemcgID || id == e.CgroupID) {
				ref := v.pods[i]
				a.Pod, a.Cgroup = &ref, ref.CgroupRel
				return a
			}
		}
		return a
	}
	a.Cgroup = rel
	for i := range v.pods {
		pr := v.pods[i].CgroupRel
		if pr == "" || !beneath(rel, pr) {
			continue
		}
		ref := v.pods[i]
		a.Pod = &ref
		if sub := strings.TrimPrefix(strings.TrimPrefix(rel, pr), "/"); sub != "" {
			a.Container, _, _ = strings.Cut(sub, "/")
		}
		break
	}
	return a
}

// calmNow tells whether the next tick may take a calm snapshot: the policy
// finds obs calm and no evicted pod's release is being watched.
func (m *Manager) calmNow(obs Observations) bool {
	m.mu.Lock()
	tracking := len(m.tracking)
	m.mu.Unlock()
	return tracking == 0 && m.policy.Calm(obs)
}

// CalmLeft counts the ticks whose calm snapshot was found not calm and
// taken again whole.
func (m *Manager) CalmLeft() uint64 { return m.calmLeft.Load() }
