package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/eviction"
	"github.com/nodeguard/nodeguard/eviction/admission"
	"github.com/nodeguard/nodeguard/internal/statestore"
	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/metrics"
	"github.com/nodeguard/nodeguard/pressure"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
	"github.com/nodeguard/nodeguard/pressure/tripwire"
)

// evictionObserver turns the manager's reports into metrics, the API's
// event log and log lines.
type evictionObserver struct {
	m      *metrics.Eviction // nil without metrics
	events *api.EventLog
	log    *slog.Logger
	// onConditions, once set (node mode), is called when the node
	// conditions change.
	onConditions atomic.Pointer[func()]
}

func stages(t eviction.Timing) map[string]time.Duration {
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

func toEvent(d eviction.Decision, t eviction.Timing) decisionEvent {
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

func (o *evictionObserver) OnDecision(d eviction.Decision, t eviction.Timing) {
	if o.m != nil && t.Err == nil {
		o.m.Evicted(d.Signal, d.DryRun, stages(t))
	}
	o.events.Append(t.Decided, "eviction", toEvent(d, t))
}

func (o *evictionObserver) OnReleased(d eviction.Decision, t eviction.Timing) {
	if o.m != nil {
		o.m.Released(t.Release(), t.Total())
	}
	o.events.Append(t.Released, "eviction_released", toEvent(d, t))
}

func (o *evictionObserver) OnConditions(c map[eviction.Condition]bool) {
	if f := o.onConditions.Load(); f != nil {
		(*f)()
	}
	out := map[string]bool{}
	for k, v := range c {
		out[string(k)] = v
		if o.m != nil {
			o.m.Condition(string(k), v)
		}
	}
	o.events.Append(time.Now(), "node_conditions", out)
}

func (o *evictionObserver) OnOOMKill(a eviction.OOMKillAttribution) {
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
// policy once it exists. The decisions are package admission's.
type admitter struct {
	policy atomic.Pointer[eviction.Policy]
	// fit, in node mode, is the node allocatable check (admission.Fit).
	fit func(*corev1.Pod) error
}

func (a *admitter) admit(p *corev1.Pod) error {
	if a.fit != nil {
		if err := a.fit(p); err != nil {
			return err
		}
	}
	pol := a.policy.Load()
	if pol == nil {
		return nil
	}
	return admission.Pressure(pol, p)
}

// podRootTripwire is the tripwire on the pod cgroup root, armed where
// eviction.TripwirePolicy says after every snapshot, waking the manager when
// it fires. On cgroup v2 it is the working set (tripwire.KindWorkingSet,
// with its memory.high assist): a line it has fired for does not fire
// again until the working set has come back below it (with hysteresis),
// with at least 20 ms between fires.
type podRootTripwire struct {
	tw  tripwire.Tripwire
	log *slog.Logger
	mu  sync.Mutex
	// policy and failed are guarded by mu: snapshots and reloads come
	// from different goroutines.
	policy *eviction.TripwirePolicy
	failed bool
}

// newPodRootTripwire watches dir with the package's default mechanism (v1:
// the usage threshold eventfd; v2: the working-set poll). store, the
// agent's state store, keeps the original memory.high across crashes where
// memory.high is written (and lets the poll put back one a crashed
// nodeguard left armed); legacyDir is where nodeguard kept it before the
// store, moved into it once. A record that cannot be read is quarantined,
// and memory.high goes back to "max" (the kubelet never sets memory.high
// on kubepods) only when it holds a value the tripwire of thresholds th
// could have written on a node of capacity bytes (tripwireWrites).
func newPodRootTripwire(dir cgroups.Dir, th []eviction.Threshold, store *statestore.Store, legacyDir string, capacity uint64, log *slog.Logger) (*podRootTripwire, error) {
	opts := tripwire.Options{Logger: log, Store: store, LegacyStateDir: legacyDir,
		Unarmed: tripwire.DefaultUnarmed, Written: tripwireWrites(th, capacity)}
	tw, err := tripwire.New(dir.Path, dir.Hierarchy.V2(), opts)
	if err != nil {
		return nil, err
	}
	chase := !dir.Hierarchy.V2() || opts.Mechanism == tripwire.KindMemoryHigh
	return &podRootTripwire{tw: tw, log: log, policy: eviction.NewTripwirePolicy(th, chase)}, nil
}

// tripwireWrites bounds the memory.high values the pod root's tripwire
// can write with thresholds th on a node of capacity bytes (MemTotal, the
// kubelet's memory capacity). Its line (eviction.TripwirePolicy.Line) is where
// a memory threshold is crossed: allocatable minus the threshold, or
// capacity minus the threshold minus the node's memory outside the pods,
// so never above capacity minus the threshold, and anywhere above zero as
// the memory outside the pods grows. The working-set assist writes the
// line plus the pod root's inactive_file, at least one charge batch
// (256 KiB) above usage; the memory.high mechanism chases usage by as
// much; inactive_file and usage are at most capacity. So: from 256 KiB to
// the highest line plus capacity. Without a memory threshold or a
// capacity the tripwire never arms, and nothing is recognised as its.
func tripwireWrites(th []eviction.Threshold, capacity uint64) tripwire.HighRange {
	var top uint64
	for _, t := range th {
		if t.Signal != nodestats.SignalMemoryAvailable && t.Signal != nodestats.SignalAllocatableMemoryAvailable {
			continue
		}
		thr := t.Value.Amount(int64(capacity))
		if thr >= 0 && uint64(thr) < capacity {
			top = max(top, capacity-uint64(thr))
		}
	}
	if top == 0 {
		return tripwire.HighRange{}
	}
	return tripwire.HighRange{Min: 256 << 10, Max: top + capacity}
}

// rearm moves the wire after a snapshot, where the policy says. A failed
// Arm is logged once, until one succeeds, and tried again at the next
// snapshot.
func (p *podRootTripwire) rearm(s *pressure.Snapshot) {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.policy.Next(s)
	if !ok {
		// Nothing to arm, or the line armed last (before any failure)
		// is near enough: the wire is where it should be, which is
		// what the watchdog asks of it.
		p.failed = false
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
	p.policy.Armed(at)
}

// run forwards fires to the manager until ctx ends; the tripwire
// stopping before is an error (its cgroup went away, its descriptor
// failed).
func (p *podRootTripwire) run(ctx context.Context, mgr *eviction.Manager) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case f, ok := <-p.tw.C():
			if !ok {
				if err := p.tw.Err(); err != nil {
					return fmt.Errorf("tripwire stopped: %w", err)
				}
				return errors.New("tripwire stopped")
			}
			mgr.Wake("tripwire:"+f.Kind, f.At)
		}
	}
}
