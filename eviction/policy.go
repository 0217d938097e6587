package eviction

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/pressure/nodestats"
	"github.com/nodeguard/nodeguard/psi"
)

// Defaults of PolicyConfig.
const (
	// DefaultPressureTransitionPeriod is the kubelet's default
	// evictionPressureTransitionPeriod: a node condition stays true this
	// long after the last threshold of its kind was met, so that it does
	// not flap (and admission does not open and close) at every sample.
	DefaultPressureTransitionPeriod = 5 * time.Minute
	// DefaultPendingReleaseTimeout bounds how long an evicted pod's usage
	// is counted as about to be freed: long enough for a hard kill plus
	// the runtime's teardown, and the kubelet's podCleanupTimeout; a pod
	// that still holds its memory then is no longer trusted to free it.
	DefaultPendingReleaseTimeout = 30 * time.Second
)

// PolicyConfig configures a Policy.
type PolicyConfig struct {
	// Thresholds from ParseThresholds.
	Thresholds []Threshold
	// PSIRules from ParsePSIRule.
	PSIRules []PSIRule
	// EvictionPressureTransitionPeriod: see
	// DefaultPressureTransitionPeriod (the default when 0).
	EvictionPressureTransitionPeriod time.Duration
	// EvictionMaxPodGracePeriod caps the grace period of soft evictions
	// (soft thresholds and PSI rules): a victim gets min(its own grace
	// period, this). 0 leaves the pod's own.
	EvictionMaxPodGracePeriod time.Duration
	// PendingReleaseTimeout: see DefaultPendingReleaseTimeout (the
	// default when 0).
	PendingReleaseTimeout time.Duration
	// CoolDown is the time after a decision during which no new decision
	// is made for the same Resource, unless a hard threshold is met and no
	// victim of that resource is pending release. 0 (the default) relies
	// on pending-release accounting alone.
	CoolDown time.Duration
	// DryRun: decisions carry DryRun and are not counted as pending
	// release.
	DryRun bool
}

// Validate checks the configuration; errors name the field.
func (c *PolicyConfig) Validate() error {
	var errs []error
	for i, t := range c.Thresholds {
		if _, ok := signalInfos[t.Signal]; !ok {
			errs = append(errs, fmt.Errorf("thresholds[%d]: %w %q", i, ErrUnsupportedSignal, t.Signal))
		}
		if t.Value.Quantity <= 0 && (t.Value.Percentage <= 0 || t.Value.Percentage >= 1) {
			errs = append(errs, fmt.Errorf("thresholds[%d] (%s): %w: want a positive quantity or a percentage between 0%% and 100%%", i, t, ErrInvalid))
		}
		if t.GracePeriod < 0 {
			errs = append(errs, fmt.Errorf("thresholds[%d] (%s): %w: negative grace period", i, t, ErrInvalid))
		}
		if mr := t.MinReclaim; mr != nil && (mr.Quantity < 0 || mr.Percentage < 0 || mr.Percentage > 1) {
			errs = append(errs, fmt.Errorf("thresholds[%d] (%s): %w: minimum reclaim out of range", i, t, ErrInvalid))
		}
	}
	for i, r := range c.PSIRules {
		if _, err := parsePSIRule(r.String()); err != nil || r.For < 0 {
			errs = append(errs, fmt.Errorf("psiRules[%d] (%s): %w", i, r, ErrInvalid))
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"evictionPressureTransitionPeriod", c.EvictionPressureTransitionPeriod},
		{"evictionMaxPodGracePeriod", c.EvictionMaxPodGracePeriod},
		{"pendingReleaseTimeout", c.PendingReleaseTimeout},
		{"coolDown", c.CoolDown},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s: %w: %v is negative", d.name, ErrInvalid, d.v))
		}
	}
	return errors.Join(errs...)
}

// Policy decides evictions. It is pure apart from its own small state
// (when thresholds were first met, which ones await their minimum
// reclaim, the node conditions, the victims pending release); time is
// passed in. Its methods are safe for concurrent use.
type Policy struct {
	cfg PolicyConfig

	mu sync.Mutex
	// per threshold: when it was first met (zero: not met), and whether
	// it had met its grace period at the last evaluation (the kubelet's
	// thresholdsMet, for minimum reclaim)
	firstMet []time.Time
	latched  []bool
	// per PSI rule: since when a node rule's level has been exceeded, and
	// per pod for pod rules
	psiSince    []time.Time
	podPSISince []map[types.UID]time.Time
	// node conditions: when last observed, and the reported value
	condSeen map[Condition]time.Time
	conds    map[Condition]bool
	pending  map[types.UID]*pendingVictim
	// last decision per resource, for the cool-down
	lastAction map[Resource]time.Time
}

// pendingVictim is an evicted pod whose resources are counted as freed.
type pendingVictim struct {
	victim   Pod // as it was at decision time
	hard     bool
	resource Resource
	at       time.Time
}

// NewPolicy validates cfg and returns a Policy with no history.
func NewPolicy(cfg PolicyConfig) (*Policy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("new policy: %w", err)
	}
	if cfg.EvictionPressureTransitionPeriod == 0 {
		cfg.EvictionPressureTransitionPeriod = DefaultPressureTransitionPeriod
	}
	if cfg.PendingReleaseTimeout == 0 {
		cfg.PendingReleaseTimeout = DefaultPendingReleaseTimeout
	}
	cfg.Thresholds = slices.Clone(cfg.Thresholds)
	cfg.PSIRules = slices.Clone(cfg.PSIRules)
	p := &Policy{
		cfg:         cfg,
		firstMet:    make([]time.Time, len(cfg.Thresholds)),
		latched:     make([]bool, len(cfg.Thresholds)),
		psiSince:    make([]time.Time, len(cfg.PSIRules)),
		podPSISince: make([]map[types.UID]time.Time, len(cfg.PSIRules)),
		condSeen:    map[Condition]time.Time{},
		conds:       map[Condition]bool{},
		pending:     map[types.UID]*pendingVictim{},
		lastAction:  map[Resource]time.Time{},
	}
	for i := range p.podPSISince {
		p.podPSISince[i] = map[types.UID]time.Time{}
	}
	return p, nil
}

// Config returns the configuration in effect (defaults applied).
func (p *Policy) Config() PolicyConfig {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg
}

// ThresholdStatus describes one threshold or PSI rule that is met, for
// logs and metrics.
type ThresholdStatus struct {
	// Signal and Threshold as in Decision.
	Signal    string
	Threshold string
	Hard      bool
	PSI       bool
	// Observed is the available value (bytes or count) or the PSI
	// average (percent); Quantity the threshold resolved against the
	// capacity (for PSI the percentage).
	Observed, Quantity float64
	// Credited is what pending victims are about to free, added to
	// Observed before deciding (thresholds only).
	Credited int64
	// MetSince is when it was first met without a break.
	MetSince time.Time
	// State says what the policy did about it: "evict" (a decision was
	// made), "grace-period" (soft, or a PSI rule's "for", still running),
	// "pending-release" (what pending victims free is enough),
	// "cool-down", "decided" (another threshold of the same resource
	// decided), "no-victim" (no evictable pod).
	State string
}

// The values of ThresholdStatus.State.
const (
	StateEvict          = "evict"
	StateGracePeriod    = "grace-period"
	StatePendingRelease = "pending-release"
	StateCoolDown       = "cool-down"
	StateDecided        = "decided"
	StateNoVictim       = "no-victim"
)

// Result is the outcome of one evaluation.
type Result struct {
	// Decisions: at most one per Resource, memory first.
	Decisions []Decision
	// Conditions holds MemoryPressure, DiskPressure and PIDPressure, with
	// the transition period applied.
	Conditions map[Condition]bool
	// NextVictim is the top-ranked evictable pod for memory while a
	// memory threshold or node memory PSI rule is met or within twice its
	// distance (available below twice the threshold, pressure above half
	// the level), excluding pods already being killed hard: the pod whose
	// oom_score_adj the manager raises. Nil otherwise.
	NextVictim *Pod
	// Met lists the thresholds and PSI rules that are met.
	Met []ThresholdStatus
	// Pending is the memory (bytes) of victims pending release.
	Pending int64
}

// thresholdEval is one threshold's state during an evaluation.
type thresholdEval struct {
	idx       int
	t         *Threshold
	info      signalInfo
	obs       nodestats.Observation
	quantity  int64 // the threshold resolved
	limit     int64 // quantity, plus the minimum reclaim while latched
	met       bool  // raw (or latched)
	graceMet  bool
	credit    int64
	effective bool // still met after crediting pending victims
	status    int  // index in Result.Met
}

// psiEval is one node PSI rule's state during an evaluation.
type psiEval struct {
	idx      int
	r        *PSIRule
	value    float64
	met, due bool // level exceeded; exceeded for For
	status   int
}

// Evaluate evaluates obs at now and returns the decisions. Each decision
// not in dry run enters pending-release accounting until Released or
// Forget is called for its pod, the pod no longer appears in obs.Pods, or
// PendingReleaseTimeout passes.
func (p *Policy) Evaluate(obs Observations, now time.Time) Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	byUID := make(map[types.UID]*Pod, len(obs.Pods))
	for i := range obs.Pods {
		byUID[obs.Pods[i].UID] = &obs.Pods[i]
	}
	p.expire(byUID, now)

	var res Result
	condMet := map[Condition]bool{}

	ths := p.evalThresholds(obs, byUID, now, &res, condMet)
	nodePSI := p.evalNodePSI(obs, now, &res, condMet)
	podDue := p.evalPodPSI(obs, now, &res)

	chosen := map[types.UID]bool{}
	for _, r := range resources {
		d, ok := p.decide(r, obs, ths, nodePSI, podDue, chosen, now, &res)
		if !ok {
			continue
		}
		chosen[d.Victim.UID] = true
		res.Decisions = append(res.Decisions, d)
		p.lastAction[r] = now
		if !d.DryRun {
			p.pending[d.Victim.UID] = &pendingVictim{victim: d.Victim, hard: d.Hard, resource: r, at: now}
		}
	}

	for i := range ths {
		e := &ths[i]
		p.latched[e.idx] = e.met && e.graceMet
	}
	p.updateConditions(condMet, now, &res)
	res.NextVictim = p.nextVictim(obs, ths, nodePSI, chosen, res.Decisions)
	for _, v := range p.pending {
		res.Pending += remaining(v, byUID, signalInfos[nodestats.SignalMemoryAvailable])
	}
	return res
}

// expire drops pending victims that vanished or timed out.
func (p *Policy) expire(byUID map[types.UID]*Pod, now time.Time) {
	for uid, v := range p.pending {
		if _, ok := byUID[uid]; !ok || now.Sub(v.at) >= p.cfg.PendingReleaseTimeout {
			delete(p.pending, uid)
		}
	}
}

// remaining is what a pending victim still holds of a resource: its
// current usage while it is listed with a known usage (what its death
// frees; what it freed already shows in the observations), otherwise its
// usage at decision time.
func remaining(v *pendingVictim, byUID map[types.UID]*Pod, info signalInfo) int64 {
	if cur, ok := byUID[v.victim.UID]; ok && !(info.resource == ResourceMemory && cur.UsageUnknown) {
		return max(info.usage(cur), 0)
	}
	return max(info.usage(&v.victim), 0)
}

// credit is what pending victims free of sig's resource: hard thresholds
// count only hard victims (a soft eviction in progress never holds back a
// hard one), soft thresholds count all.
func (p *Policy) credit(info signalInfo, hard bool, byUID map[types.UID]*Pod) int64 {
	var sum int64
	for _, v := range p.pending {
		if hard && !v.hard {
			continue
		}
		sum += remaining(v, byUID, info)
	}
	return sum
}

func (p *Policy) evalThresholds(obs Observations, byUID map[types.UID]*Pod, now time.Time, res *Result, condMet map[Condition]bool) []thresholdEval {
	var out []thresholdEval
	for i := range p.cfg.Thresholds {
		t := &p.cfg.Thresholds[i]
		o, ok := obs.Signals[t.Signal]
		if !ok {
			// No observation: not met (the kubelet skips the threshold
			// and so forgets when it was first met).
			p.firstMet[i], p.latched[i] = time.Time{}, false
			continue
		}
		e := thresholdEval{idx: i, t: t, info: signalInfos[t.Signal], obs: o}
		e.quantity = t.Value.Amount(o.Capacity)
		e.limit = e.quantity
		if p.latched[i] && t.MinReclaim != nil {
			e.limit += t.MinReclaim.Amount(o.Capacity)
		}
		e.met = o.Available < e.limit
		if !e.met {
			p.firstMet[i], p.latched[i] = time.Time{}, false
			continue
		}
		if p.firstMet[i].IsZero() {
			p.firstMet[i] = now
		}
		e.graceMet = now.Sub(p.firstMet[i]) >= t.GracePeriod
		e.credit = p.credit(e.info, t.Hard(), byUID)
		e.effective = o.Available+e.credit < e.limit
		condMet[e.info.condition] = true
		e.status = len(res.Met)
		st := ThresholdStatus{
			Signal: string(t.Signal), Threshold: t.String(), Hard: t.Hard(),
			Observed: float64(o.Available), Quantity: float64(e.quantity),
			Credited: e.credit, MetSince: p.firstMet[i],
		}
		switch {
		case !e.graceMet:
			st.State = StateGracePeriod
		case !e.effective:
			st.State = StatePendingRelease
		}
		res.Met = append(res.Met, st)
		out = append(out, e)
	}
	return out
}

func (p *Policy) evalNodePSI(obs Observations, now time.Time, res *Result, condMet map[Condition]bool) []psiEval {
	var out []psiEval
	for i := range p.cfg.PSIRules {
		r := &p.cfg.PSIRules[i]
		if r.Pod {
			continue
		}
		st, ok := obs.NodePSI[r.Resource]
		v, ok2 := r.value(st)
		e := psiEval{idx: i, r: r, value: v, met: ok && ok2 && v > r.Percent}
		if !e.met {
			p.psiSince[i] = time.Time{}
			out = append(out, e)
			continue
		}
		if p.psiSince[i].IsZero() {
			p.psiSince[i] = now
		}
		e.due = now.Sub(p.psiSince[i]) >= r.For
		if r.Resource == psi.Memory {
			condMet[MemoryPressure] = true
		}
		e.status = len(res.Met)
		s := ThresholdStatus{Signal: r.Signal(), Threshold: r.String(), PSI: true,
			Observed: v, Quantity: r.Percent, MetSince: p.psiSince[i]}
		if !e.due {
			s.State = StateGracePeriod
		}
		res.Met = append(res.Met, s)
		out = append(out, e)
	}
	return out
}

// podPSIDue is a pod whose pod rule is due.
type podPSIDue struct {
	idx    int
	rule   *PSIRule
	pod    *Pod
	value  float64
	status int
}

// podPSI returns a pod's stats for a resource.
func podPSI(pod *Pod, r psi.Resource) (psi.Stats, bool) {
	switch r {
	case psi.CPU:
		return pod.CPUPSI, pod.HasCPUPSI
	case psi.IO:
		return pod.IOPSI, pod.HasIOPSI
	}
	return pod.PSI, pod.HasPSI
}

func (p *Policy) evalPodPSI(obs Observations, now time.Time, res *Result) []podPSIDue {
	var out []podPSIDue
	for i := range p.cfg.PSIRules {
		r := &p.cfg.PSIRules[i]
		if !r.Pod {
			continue
		}
		since := p.podPSISince[i]
		seen := make(map[types.UID]bool, len(obs.Pods))
		for j := range obs.Pods {
			pod := &obs.Pods[j]
			st, ok := podPSI(pod, r.Resource)
			v, ok2 := r.value(st)
			if !ok || !ok2 || v <= r.Percent {
				continue
			}
			seen[pod.UID] = true
			if since[pod.UID].IsZero() {
				since[pod.UID] = now
			}
			due := now.Sub(since[pod.UID]) >= r.For
			s := ThresholdStatus{Signal: r.Signal(), Threshold: r.String() + " (" + pod.Namespace + "/" + pod.Name + ")",
				PSI: true, Observed: v, Quantity: r.Percent, MetSince: since[pod.UID]}
			if due {
				out = append(out, podPSIDue{idx: i, rule: r, pod: pod, value: v, status: len(res.Met)})
			} else {
				s.State = StateGracePeriod
			}
			res.Met = append(res.Met, s)
		}
		for uid := range since {
			if !seen[uid] {
				delete(since, uid)
			}
		}
	}
	return out
}

// pendingFor reports whether a victim decided for r is pending release.
func (p *Policy) pendingFor(r Resource) bool {
	for _, v := range p.pending {
		if v.resource == r {
			return true
		}
	}
	return false
}

// candidate reports whether pod may be chosen: evictable, not being
// evicted by the actor, not chosen in this evaluation, not pending
// release (a hard decision may escalate a soft victim in progress), and
// for a soft decision not Refused.
func (p *Policy) candidate(pod *Pod, hard bool, obs Observations, chosen map[types.UID]bool) bool {
	if !pod.Evictable() || obs.InFlight[pod.UID] || chosen[pod.UID] || (pod.Refused && !hard) {
		return false
	}
	if v, ok := p.pending[pod.UID]; ok && (!hard || v.hard) {
		return false
	}
	return true
}

// pick returns the first candidate in sig's ranking and its rank.
func (p *Policy) pick(obs Observations, sig nodestats.Signal, hard bool, chosen map[types.UID]bool) (*Pod, int) {
	for i, pod := range Rank(obs.Pods, sig) {
		if p.candidate(pod, hard, obs, chosen) {
			return pod, i
		}
	}
	return nil, -1
}

// held marks a met rule that may not act in this pass: the resource was
// decided by an earlier rule, or it is cooling down. It reports whether
// it did.
func held(st *ThresholdStatus, decided, cooling bool) bool {
	switch {
	case decided:
		st.State = StateDecided
	case cooling:
		st.State = StateCoolDown
	default:
		return false
	}
	return true
}

// decide makes at most one decision for resource r: hard thresholds
// first, then soft ones whose grace period passed, then node PSI rules,
// then pod PSI rules.
func (p *Policy) decide(r Resource, obs Observations, ths []thresholdEval, nodePSI []psiEval, podDue []podPSIDue, chosen map[types.UID]bool, now time.Time, res *Result) (Decision, bool) {
	cooling := p.cfg.CoolDown > 0 && !p.lastAction[r].IsZero() && now.Sub(p.lastAction[r]) < p.cfg.CoolDown
	decided := false
	var out Decision
	for _, hard := range []bool{true, false} {
		for i := range ths {
			e := &ths[i]
			if e.info.resource != r || e.t.Hard() != hard || !e.graceMet || !e.effective {
				continue
			}
			st := &res.Met[e.status]
			// A hard threshold with nothing pending overrides the cool-down.
			if held(st, decided, cooling && !(hard && !p.pendingFor(r))) {
				continue
			}
			victim, rank := p.pick(obs, e.t.Signal, hard, chosen)
			if victim == nil {
				st.State = StateNoVictim
				continue
			}
			st.State = StateEvict
			decided = true
			out = p.decision(obs, now, victim, rank, r, hard)
			out.Signal, out.Threshold, out.Observed = string(e.t.Signal), e.t.String(), float64(e.obs.Available)
			out.Message = thresholdMessage(e, victim)
		}
	}
	for i := range nodePSI {
		e := &nodePSI[i]
		if e.r.resource() != r || !e.due {
			continue
		}
		st := &res.Met[e.status]
		if held(st, decided, cooling) {
			continue
		}
		if p.pendingFor(r) {
			// Pressure averages lag the release of memory by up to
			// their window: wait for the victim before another.
			st.State = StatePendingRelease
			continue
		}
		victim, rank := p.pick(obs, nodestats.SignalMemoryAvailable, false, chosen)
		if victim == nil {
			st.State = StateNoVictim
			continue
		}
		st.State = StateEvict
		decided = true
		p.psiSince[e.idx] = now // the rule must hold For again
		out = p.decision(obs, now, victim, rank, r, false)
		out.Signal, out.Threshold, out.Observed = e.r.Signal(), e.r.String(), e.value
		out.Message = psiMessage(e.r, e.value, victim, false)
	}
	// Pod rules: the pod with the highest pressure, ties in memory rank.
	var best *podPSIDue
	for i := range podDue {
		c := &podDue[i]
		if c.rule.resource() != r {
			continue
		}
		st := &res.Met[c.status]
		if held(st, decided, cooling) {
			continue
		}
		if !p.candidate(c.pod, false, obs, chosen) {
			st.State = StateNoVictim
			if _, ok := p.pending[c.pod.UID]; ok {
				st.State = StatePendingRelease
			}
			continue
		}
		if best == nil || c.value > best.value || (c.value == best.value && rankMemory(c.pod, best.pod) < 0) {
			if best != nil {
				res.Met[best.status].State = StateDecided
			}
			best = c
		} else {
			st.State = StateDecided
		}
	}
	if best != nil {
		res.Met[best.status].State = StateEvict
		decided = true
		delete(p.podPSISince[best.idx], best.pod.UID) // the rule must hold For again
		out = p.decision(obs, now, best.pod, rankOf(obs.Pods, best.pod.UID), r, false)
		out.Signal, out.Threshold, out.Observed = best.rule.Signal(), best.rule.String(), best.value
		out.Message = psiMessage(best.rule, best.value, best.pod, true)
	}
	return out, decided
}

// rankOf is the place of uid in the memory ranking.
func rankOf(pods []Pod, uid types.UID) int {
	for i, p := range Rank(pods, nodestats.SignalMemoryAvailable) {
		if p.UID == uid {
			return i
		}
	}
	return -1
}

// decision fills the common fields.
func (p *Policy) decision(obs Observations, now time.Time, victim *Pod, rank int, r Resource, hard bool) Decision {
	d := Decision{Time: now, ObservedAt: obs.Time, Hard: hard, Victim: *victim, Rank: rank, DryRun: p.cfg.DryRun, Resource: r}
	if !hard {
		d.GracePeriod = victim.GracePeriod
		if m := p.cfg.EvictionMaxPodGracePeriod; m > 0 && d.GracePeriod > m {
			d.GracePeriod = m
		}
		if d.GracePeriod < 0 {
			d.GracePeriod = 0
		}
	}
	return d
}

func (p *Policy) updateConditions(condMet map[Condition]bool, now time.Time, res *Result) {
	res.Conditions = make(map[Condition]bool, 3)
	for _, c := range []Condition{MemoryPressure, DiskPressure, PIDPressure} {
		if condMet[c] {
			p.condSeen[c] = now
		}
		seen := p.condSeen[c]
		on := !seen.IsZero() && now.Sub(seen) < p.cfg.EvictionPressureTransitionPeriod
		p.conds[c] = on
		res.Conditions[c] = on
	}
}

// memorySignals are the signals nextVictim measures its distance on.
var memorySignals = []nodestats.Signal{nodestats.SignalMemoryAvailable, nodestats.SignalAllocatableMemoryAvailable}

func memorySignal(s nodestats.Signal) bool { return slices.Contains(memorySignals, s) }

// nextVictim returns the pod whose oom_score_adj to raise, or nil.
func (p *Policy) nextVictim(obs Observations, ths []thresholdEval, nodePSI []psiEval, chosen map[types.UID]bool, decided []Decision) *Pod {
	near := false
	for _, sig := range memorySignals {
		o, ok := obs.Signals[sig]
		if !ok {
			continue
		}
		for i := range p.cfg.Thresholds {
			t := &p.cfg.Thresholds[i]
			if t.Signal == sig && o.Available < 2*t.Value.Amount(o.Capacity) {
				near = true
			}
		}
	}
	for _, e := range nodePSI {
		if e.r.Resource == psi.Memory && e.value > e.r.Percent/2 {
			near = true
		}
	}
	if !near {
		return nil
	}
	hardNow := map[types.UID]bool{}
	for _, d := range decided {
		if d.Hard {
			hardNow[d.Victim.UID] = true
		}
	}
	for _, pod := range Rank(obs.Pods, nodestats.SignalMemoryAvailable) {
		if !pod.Evictable() || hardNow[pod.UID] {
			continue
		}
		if v, ok := p.pending[pod.UID]; ok && v.hard {
			continue
		}
		c := *pod
		return &c
	}
	return nil
}

// Released tells the policy that an evicted pod's resources were freed:
// its usage is no longer counted as pending release.
func (p *Policy) Released(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.pending, uid)
}

// Forget tells the policy that an eviction did not happen (the actor
// failed): the pod is no longer pending release and the cool-down its
// decision started is lifted, so the next evaluation decides again.
func (p *Policy) Forget(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.pending[uid]
	if !ok {
		return
	}
	delete(p.pending, uid)
	if p.lastAction[v.resource].Equal(v.at) {
		delete(p.lastAction, v.resource)
	}
}

// Conditions returns the node conditions of the last evaluation.
func (p *Policy) Conditions() map[Condition]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[Condition]bool, 3)
	for _, c := range []Condition{MemoryPressure, DiskPressure, PIDPressure} {
		out[c] = p.conds[c]
	}
	return out
}

// Admit is the kubelet's eviction admission: with no pressure condition
// every pod is admitted; critical pods always are; under MemoryPressure
// alone every pod but BestEffort ones is; under DiskPressure or
// PIDPressure no other pod is. A refusal is an *AdmitError ("The node had
// condition: [MemoryPressure]."). The kubelet also admits a BestEffort pod
// that tolerates the node.kubernetes.io/memory-pressure taint; Pod does not
// carry tolerations, so the caller checks that one before asking.
func (p *Policy) Admit(pod Pod) error {
	conds := p.Conditions()
	var held []Condition
	for _, c := range []Condition{MemoryPressure, DiskPressure, PIDPressure} {
		if conds[c] {
			held = append(held, c)
		}
	}
	if len(held) == 0 || pod.Critical || pod.Static || pod.Priority >= SystemCriticalPriority {
		return nil
	}
	if len(held) == 1 && held[0] == MemoryPressure && pod.QOS != corev1.PodQOSBestEffort {
		return nil
	}
	return &AdmitError{Conditions: held}
}

// Calm reports whether obs is far from every decision: each memory
// signal has at least twice its threshold available (nextVictim's
// distance), every other threshold is not met, each node PSI rule reads
// at most half its level, no pod-scoped PSI rule is configured, no
// victim is pending release and no condition is held. On such
// observations Evaluate decides nothing and names no next victim, and
// the pods' own figures are not looked at: the manager may then take
// them from a calm snapshot (pressure.Snapshotter.SnapshotCalm), in which
// they are those of the last snapshot that was not calm, or of the last
// metrics scrape: minutes old on a calm node. A signal the observations lack cannot
// meet its threshold, here as in Evaluate.
//
// The disk and pid signals need no margin: their figures are the node's,
// fresh in a calm snapshot too, and a calm tick whose figures meet a
// threshold is taken again whole before anything is decided. A margin
// there would keep a node whose image filesystem is 25% free (under
// twice imagefs.available's 15%) from ever being calm.
func (p *Policy) Calm(obs Observations) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.pending) > 0 {
		return false
	}
	for _, on := range p.conds {
		if on {
			return false
		}
	}
	for i := range p.cfg.Thresholds {
		t := &p.cfg.Thresholds[i]
		o, ok := obs.Signals[t.Signal]
		if !ok {
			continue
		}
		need := t.Value.Amount(o.Capacity)
		if memorySignal(t.Signal) {
			need *= 2
		}
		if o.Available < need {
			return false
		}
	}
	for i := range p.cfg.PSIRules {
		r := &p.cfg.PSIRules[i]
		if r.Pod {
			return false
		}
		if v, ok := r.value(obs.NodePSI[r.Resource]); ok && v > r.Percent/2 {
			return false
		}
	}
	return true
}
