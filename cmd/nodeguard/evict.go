package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/qos"
	"github.com/nodeguard/nodeguard/loader/event"
	"github.com/nodeguard/nodeguard/metrics"
	"github.com/nodeguard/nodeguard/oom"
	"github.com/nodeguard/nodeguard/oom/tripwire"
	"github.com/nodeguard/nodeguard/pressure"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// evictionConfig is the eviction section of the configuration: the
// kubelet's eviction fields with their names and syntax, plus PSI rules
// and nodeguard's own knobs.
type evictionConfig struct {
	oom.ThresholdConfig `json:",inline"`
	// EvictionPressureTransitionPeriod: how long a node condition stays
	// after its last threshold stopped being met (kubelet default 5m).
	EvictionPressureTransitionPeriod metav1.Duration `json:"evictionPressureTransitionPeriod"`
	// EvictionMaxPodGracePeriod caps soft evictions' grace, in seconds
	// (the kubelet's type); 0 leaves the pod's own.
	EvictionMaxPodGracePeriod int32 `json:"evictionMaxPodGracePeriod"`
	// PSIRules, e.g. "memory.full.avg10>40 for 10s" (node) or
	// "pod:memory.some.avg10>60 for 5s" (each pod cgroup).
	PSIRules []string `json:"psiRules"`
	// DryRun decides and reports but neither evicts nor touches
	// oom_score_adj.
	DryRun bool `json:"dryRun"`
	// Tick is the safety tick (default 1s): an evaluation even when no
	// tripwire, trigger or kernel event woke the manager.
	Tick metav1.Duration `json:"tick"`
	// CoolDown after each eviction (default 0: pending-release
	// accounting alone prevents over-eviction).
	CoolDown metav1.Duration `json:"coolDown"`
	// Exempt pods ("namespace/name") are never evicted.
	Exempt []string `json:"exempt"`
	// Disabled turns the eviction manager off (sensing and metrics stay).
	Disabled bool `json:"disabled"`
}

// policy parses the section into the oom package's configuration.
func (c evictionConfig) policy() (oom.PolicyConfig, error) {
	tc := c.ThresholdConfig
	if tc.EvictionHard == nil {
		tc.EvictionHard = oom.DefaultEvictionHard()
	}
	if tc.EnforceNodeAllocatable == nil {
		// nodeguard enforces node allocatable on kubepods, as the
		// kubelet's enforceNodeAllocatable=[pods].
		tc.EnforceNodeAllocatable = []string{"pods"}
	}
	th, err := oom.ParseThresholds(tc)
	if err != nil {
		return oom.PolicyConfig{}, fmt.Errorf("eviction: %w", err)
	}
	pc := oom.PolicyConfig{
		Thresholds:                       th,
		EvictionPressureTransitionPeriod: c.EvictionPressureTransitionPeriod.Duration,
		EvictionMaxPodGracePeriod:        time.Duration(c.EvictionMaxPodGracePeriod) * time.Second,
		CoolDown:                         c.CoolDown.Duration,
		DryRun:                           c.DryRun,
	}
	for i, s := range c.PSIRules {
		r, err := oom.ParsePSIRule(s)
		if err != nil {
			return pc, fmt.Errorf("eviction.psiRules[%d]: %w", i, err)
		}
		pc.PSIRules = append(pc.PSIRules, r)
	}
	if c.EvictionMaxPodGracePeriod < 0 {
		return pc, fmt.Errorf("eviction.evictionMaxPodGracePeriod: %d is negative", c.EvictionMaxPodGracePeriod)
	}
	if err := pc.Validate(); err != nil {
		return pc, fmt.Errorf("eviction: %w", err)
	}
	return pc, nil
}

// evictionObserver turns the manager's reports into metrics, the API's
// event log and log lines.
type evictionObserver struct {
	m      *metrics.Eviction // nil without metrics
	events *api.EventLog
	log    *slog.Logger
}

func stages(t oom.Timing) map[string]time.Duration {
	out := map[string]time.Duration{}
	for name, d := range map[string]time.Duration{
		metrics.StageDetect: t.Detect(), metrics.StageDecide: t.Decide(), metrics.StageKill: t.Kill(),
	} {
		if d > 0 {
			out[name] = d
		}
	}
	return out
}

// decisionEvent is the API's view of an eviction.
type decisionEvent struct {
	Signal      string        `json:"signal"`
	Threshold   string        `json:"threshold"`
	Observed    float64       `json:"observed"`
	Victim      string        `json:"victim"`
	UID         string        `json:"uid"`
	Rank        int           `json:"rank"`
	Hard        bool          `json:"hard"`
	DryRun      bool          `json:"dry_run"`
	Message     string        `json:"message"`
	Crossed     time.Time     `json:"crossed"`
	ObservedAt  time.Time     `json:"observed_at"`
	KillSent    time.Time     `json:"kill_sent,omitzero"`
	DetectUS    int64         `json:"detect_us"`
	DecideUS    int64         `json:"decide_us"`
	KillUS      int64         `json:"kill_us"`
	ReleaseUS   int64         `json:"release_us,omitempty"`
	Error       string        `json:"error,omitempty"`
	GracePeriod time.Duration `json:"grace_period"`
}

func toEvent(d oom.Decision, t oom.Timing) decisionEvent {
	e := decisionEvent{
		Signal: d.Signal, Threshold: d.Threshold, Observed: d.Observed,
		Victim: d.Victim.Namespace + "/" + d.Victim.Name, UID: string(d.Victim.UID), Rank: d.Rank,
		Hard: d.Hard, DryRun: d.DryRun, Message: d.Message, Crossed: t.Crossed, GracePeriod: d.GracePeriod,
		ObservedAt: d.ObservedAt, KillSent: t.KillSent,
		DetectUS: t.Detect().Microseconds(), DecideUS: t.Decide().Microseconds(), KillUS: t.Kill().Microseconds(),
		ReleaseUS: t.Release().Microseconds(),
	}
	if t.Err != nil {
		e.Error = t.Err.Error()
	}
	return e
}

func (o *evictionObserver) OnDecision(d oom.Decision, t oom.Timing) {
	if o.m != nil && t.Err == nil {
		o.m.Evicted(d.Signal, d.DryRun, stages(t))
	}
	o.events.Append(t.Decided, "eviction", toEvent(d, t))
}

func (o *evictionObserver) OnReleased(d oom.Decision, t oom.Timing) {
	if o.m != nil {
		o.m.Released(t.Release(), t.Total())
	}
	o.events.Append(t.Released, "eviction_released", toEvent(d, t))
}

func (o *evictionObserver) OnConditions(c map[oom.Condition]bool) {
	out := map[string]bool{}
	for k, v := range c {
		out[string(k)] = v
		if o.m != nil {
			o.m.Condition(string(k), v)
		}
	}
	o.events.Append(time.Now(), "node_conditions", out)
}

func (o *evictionObserver) OnOOMKill(a oom.OOMKillAttribution) {
	ns, pod := "", ""
	if a.Pod != nil {
		ns, pod = a.Pod.Namespace, a.Pod.Name
	}
	if o.m != nil {
		o.m.OOMKill(ns, pod)
	}
	o.log.Warn("kernel OOM kill", "namespace", ns, "pod", pod, "container", a.Container, "cgroup", a.Cgroup, "pid", a.PID, "comm", a.Comm)
	o.events.Append(a.Time, "oom_kill", map[string]any{
		"namespace": ns, "pod": pod, "container": a.Container, "cgroup": a.Cgroup, "pid": a.PID, "comm": a.Comm,
	})
}

func (o *evictionObserver) OnStaleness(d time.Duration) {
	if o.m != nil {
		o.m.Staleness(d)
	}
}

// admitter is the lifecycle's admission hook, bound to the eviction
// policy once it exists.
type admitter struct{ policy atomic.Pointer[oom.Policy] }

func (a *admitter) admit(p *corev1.Pod) error {
	pol := a.policy.Load()
	if pol == nil {
		return nil
	}
	return pol.Admit(oom.Pod{UID: p.UID, Namespace: p.Namespace, Name: p.Name, QOS: qos.Class(p),
		Priority: qos.Priority(p), Critical: qos.IsCritical(p)})
}

// podRootTripwire keeps a tripwire on the pod cgroup root armed at the
// usage where the nearest memory threshold would be crossed, recomputed
// from every snapshot, and wakes the manager when it fires. On cgroup v2
// the tripwire is the working set (tripwire.KindWorkingSet, with its
// memory.high assist): it fires when the pods' working set, not their
// usage, reaches the line, so page cache above the line neither fires nor
// throttles anyone (memory.high sits above usage by the working set's
// headroom); and a line it has fired for does not fire again until the
// working set has come back below it (with hysteresis), with at least 20
// ms between fires.
type podRootTripwire struct {
	tw tripwire.Tripwire
	// chase keeps the line above usage once usage is past it: on
	// v2 with tripwire.KindMemoryHigh, where a memory.high below usage
	// would make the writer reclaim synchronously, and on v1 as it always
	// was (a usage threshold armed below usage fires only after usage
	// went down and up again). Not for the working-set poll, whose line
	// stays where the threshold is.
	chase  bool
	th     []oom.Threshold
	log    *slog.Logger
	mu     sync.Mutex
	armed  uint64
	failed bool
}

// newPodRootTripwire watches dir with the package's default mechanism (v1:
// the usage threshold eventfd; v2: the working-set poll). stateDir
// (beneath nodeguard's rootDir) keeps the original memory.high across
// crashes where memory.high is written, and lets the working-set poll put
// back one that a crashed older nodeguard left armed.
func newPodRootTripwire(dir cgroups.Dir, th []oom.Threshold, stateDir string, log *slog.Logger) (*podRootTripwire, error) {
	opts := tripwire.Options{Logger: log, StateDir: stateDir}
	tw, err := tripwire.New(dir.Path, dir.Hierarchy.V2(), opts)
	if err != nil {
		return nil, err
	}
	return &podRootTripwire{tw: tw, th: th, log: log, chase: !dir.Hierarchy.V2() || opts.Mechanism == tripwire.KindMemoryHigh}, nil
}

// target is the pod root usage at which the nearest memory threshold is
// crossed, from the snapshot's signals: allocatableMemory.available<T at
// allocatable-T; memory.available<T where the node's working set reaches
// capacity-T, i.e. the pods' share of it. Usage counts page cache the
// working set does not, so the wire fires early, never late; the manager
// confirms on a fresh snapshot.
func (p *podRootTripwire) target(s *pressure.Snapshot) (uint64, bool) {
	p.mu.Lock()
	th := p.th // replaced, never modified, by setThresholds
	p.mu.Unlock()
	best := uint64(0)
	for _, t := range th {
		obs, ok := s.Signal(t.Signal)
		if !ok {
			continue
		}
		thr := t.Value.Resolve(obs.Capacity)
		var at int64
		switch t.Signal {
		case nodestats.SignalAllocatableMemoryAvailable:
			at = obs.Capacity - thr
		case nodestats.SignalMemoryAvailable:
			// pods usage + (node working set - pods working set) = capacity - thr
			nonPods := (obs.Capacity - obs.Available) - int64(s.Node.Pods.WorkingSet())
			at = obs.Capacity - thr - nonPods
		default:
			continue
		}
		if at > 0 && (best == 0 || uint64(at) < best) {
			best = uint64(at)
		}
	}
	return best, best > 0
}

// rearm moves the wire after a snapshot; small moves are skipped.
func (p *podRootTripwire) rearm(s *pressure.Snapshot) {
	at, ok := p.target(s)
	if !ok {
		return
	}
	if usage := s.Node.Pods.Usage; p.chase && at <= usage {
		// Usage is past the line. A v1 threshold armed below usage
		// fires only after usage has gone down and up again, and a
		// memory.high below usage would make the writer reclaim
		// synchronously: the wire must go above usage. Where the
		// working set is still below the line, usage is over it by page
		// cache: arm where the working set reaches the line if the
		// cache stays (the line plus usage - working set, the
		// allowance the kubelet's memcg notifier makes for
		// inactive_file). Not "just above usage": the wire would then
		// fire every MiB, and re-arming a v1 threshold takes two RCU
		// grace periods (5-6 ms), in which a ramp of 200 MiB/s or more
		// passes the new level before it is armed, and nothing fires
		// until the safety tick. Already over by the working set too,
		// the manager is evaluating anyway: just above usage. (The
		// working-set poll stays at the line.)
		if ws := s.Node.Pods.WorkingSet(); ws < at {
			at += usage - ws
		} else {
			at = usage + 1<<20
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if d := int64(at) - int64(p.armed); p.armed != 0 && d > -1<<20 && d < 1<<20 {
		return
	}
	if err := p.tw.Arm(at); err != nil {
		if !p.failed {
			p.log.Warn("tripwire: arm", "bytes", at, "err", err)
		}
		p.failed = true
		return
	}
	p.failed = false
	p.armed = at
}

// run forwards fires to the manager until ctx ends.
func (p *podRootTripwire) run(ctx context.Context, mgr *oom.Manager) {
	for {
		select {
		case <-ctx.Done():
			return
		case f, ok := <-p.tw.C():
			if !ok {
				if err := p.tw.Err(); err != nil && !errors.Is(err, tripwire.ErrClosed) {
					p.log.Warn("tripwire stopped", "err", err)
				}
				return
			}
			mgr.Wake("tripwire:"+f.Kind, f.At)
		}
	}
}

// forwardEvents hands kernel events to the manager without ever blocking
// the sensing loop (a full queue drops; the safety tick still runs).
type eventForwarder struct {
	ch      chan event.Event
	dropped atomic.Uint64
}

func (f *eventForwarder) send(ev event.Event) {
	switch ev.(type) {
	case *event.OOMKill, *event.Reclaim:
	default:
		return
	}
	select {
	case f.ch <- ev:
	default:
		f.dropped.Add(1)
	}
}

var _ = lifecycle.ReasonEvicted
