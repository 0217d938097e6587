// The strategies of the race through the API server: the real kubelet
// (followed through its log), the kubelet with nodeguard guard beside it
// (both logs), and nodeguard in node mode (its event log). None of them
// evicts through the race: each reports what the node's own actors did.

package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"
)

// The strategies of RunKubeEviction and the owner each needs.
const (
	// StrategyKubeletReal is the kubelet's own eviction manager: nobody
	// else acts. Within the race through the API server "kubelet" is
	// this, not the 10 s poller that imitates it.
	StrategyKubeletReal = "kubelet"
	// StrategyKubeletGuard is the kubelet with nodeguard guard beside it,
	// started for each of these trials and stopped after.
	StrategyKubeletGuard = "kubelet+guard"
	// StrategyNodeguardNode is nodeguard in node mode, the node's agent
	// instead of the kubelet.
	StrategyNodeguardNode = "nodeguard-node"

	// OwnerKubelet and OwnerNodeguard are who runs the node's pods.
	OwnerKubelet   = "kubelet"
	OwnerNodeguard = "nodeguard"
)

// DefaultKubeStrategies is the order the race through the API server runs
// and reports its strategies in: the kubelet's two first, on the kubelet,
// then node mode.
var DefaultKubeStrategies = []string{StrategyKubeletReal, StrategyKubeletGuard, StrategyNodeguardNode}

// KubeletLog opens the kubelet's log from since on (its klog lines, one
// per line: journalctl -u kubelet -o cat -f), until ctx ends or it is
// closed.
type KubeletLog func(ctx context.Context, since time.Time) (io.ReadCloser, error)

// GuardStarter starts nodeguard guard beside the kubelet and returns once
// it runs (its "nodeguard guard running" line): its log lines (JSON, one
// object a line) until it stops, and stop, which ends it and waits.
type GuardStarter func(ctx context.Context) (lines <-chan string, stop func() error, err error)

// KubeStrategyDeps is what the strategies need of the node.
type KubeStrategyDeps struct {
	KubeletLog KubeletLog
	StartGuard GuardStarter
}

// NewKubeEvictionStrategies returns the strategies of the race through the
// API server: kubelet, kubelet+guard and nodeguard-node.
func NewKubeEvictionStrategies(d KubeStrategyDeps) *EvictionStrategies {
	s := &EvictionStrategies{m: map[string]func() EvictionStrategy{}}
	s.Register(StrategyKubeletReal, func() EvictionStrategy { return &KubeletStrategy{log: d.KubeletLog, ready: make(chan struct{})} })
	s.Register(StrategyKubeletGuard, func() EvictionStrategy {
		return &KubeletGuardStrategy{log: d.KubeletLog, guard: d.StartGuard, ready: make(chan struct{})}
	})
	s.Register(StrategyNodeguardNode, func() EvictionStrategy { return &NodeModeStrategy{} })
	return s
}

// readier is a strategy that needs time to be ready (a daemon started):
// the trial starts its hog only once Ready is closed.
type readier interface {
	Ready() <-chan struct{}
}

// owned is a strategy of the race through the API server: the owner it
// needs on the node.
type owned interface {
	Owner() string
}

// strategyOwner is s's owner, or "" for a strategy of no owner.
func strategyOwner(s EvictionStrategy) string {
	if o, ok := s.(owned); ok {
		return o.Owner()
	}
	return ""
}

// KubeletEventKind is what a kubelet log line says of eviction.
type KubeletEventKind int

// Kinds of the kubelet's eviction lines.
const (
	// KubeletReclaim: "Eviction manager: attempting to reclaim": a
	// synchronize found a threshold met; the decision.
	KubeletReclaim KubeletEventKind = iota + 1
	// KubeletEvicted: "Eviction manager: pod is evicted successfully":
	// the pod's containers were killed.
	KubeletEvicted
)

// KubeletEvent is one eviction line of the kubelet's log.
type KubeletEvent struct {
	Kind KubeletEventKind
	// At is the klog header's time (microseconds, local time).
	At time.Time
	// Resource (Reclaim) and Pod ("namespace/name", Evicted).
	Resource, Pod string
}

// klogHeader is klog's text header: Lmmdd hh:mm:ss.uuuuuu threadid file:line]
var klogHeader = regexp.MustCompile(`^([IWEF])(\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.(\d{6})\s+\d+\s+[^ \]]+\]\s+(.*)$`)

var klogAttr = regexp.MustCompile(`(\w+)="([^"]*)"`)

// ErrNotKlog: a line without klog's header.
var ErrNotKlog = errors.New("not a klog line")

// ParseKlogTime reads a klog line's header: its time (the year is now's,
// or the one before when that would put it more than a day ahead of now:
// klog writes no year) and the message after it.
func ParseKlogTime(line string, now time.Time) (time.Time, string, error) {
	m := klogHeader.FindStringSubmatch(strings.TrimSpace(line))
	if m == nil {
		return time.Time{}, "", ErrNotKlog
	}
	var v [6]int
	for i := range v {
		fmt.Sscan(m[2+i], &v[i])
	}
	var us int
	fmt.Sscan(m[7], &us)
	loc := now.Location()
	t := time.Date(now.Year(), time.Month(v[0]), v[1], v[2], v[3], v[4], us*1000, loc)
	if t.Month() != time.Month(v[0]) || v[2] > 23 || v[3] > 59 || v[4] > 60 {
		return time.Time{}, "", fmt.Errorf("klog header %q: %w", m[0][:min(len(m[0]), 32)], ErrNotKlog)
	}
	if t.Sub(now) > 24*time.Hour {
		t = t.AddDate(-1, 0, 0)
	}
	return t, m[8], nil
}

// ParseKubeletEvent reads one kubelet log line; ok is false for a line
// that is not one of its eviction lines.
func ParseKubeletEvent(line string, now time.Time) (KubeletEvent, bool) {
	at, msg, err := ParseKlogTime(line, now)
	if err != nil {
		return KubeletEvent{}, false
	}
	attr := func(k string) string {
		for _, m := range klogAttr.FindAllStringSubmatch(msg, -1) {
			if m[1] == k {
				return m[2]
			}
		}
		return ""
	}
	switch {
	case strings.HasPrefix(msg, `"Eviction manager: attempting to reclaim"`):
		return KubeletEvent{Kind: KubeletReclaim, At: at, Resource: attr("resourceName")}, true
	case strings.HasPrefix(msg, `"Eviction manager: pod is evicted successfully"`):
		if p := attr("pod"); p != "" {
			return KubeletEvent{Kind: KubeletEvicted, At: at, Pod: p}, true
		}
	}
	return KubeletEvent{}, false
}

// kubeletFollower turns the kubelet's eviction lines into the trial's
// detections and evictions.
type kubeletFollower struct {
	env      *TrialEnv
	since    time.Time
	decision time.Time
}

func (f *kubeletFollower) line(l string) {
	ev, ok := ParseKubeletEvent(l, time.Now())
	if !ok || ev.At.Before(f.since) {
		return
	}
	switch ev.Kind {
	case KubeletReclaim:
		if ev.Resource != "memory" {
			return
		}
		f.decision = ev.At
		f.env.Detected(ev.At)
	case KubeletEvicted:
		f.env.AgentEvicted(AgentEviction{Actor: "kubelet", Victim: ev.Pod, ObservedAt: f.decision, Threshold: "memory pressure (its eviction manager's synchronize)"})
	}
}

// followKubelet starts reading the kubelet's log into a channel of lines,
// closed when the log ends.
func followKubelet(ctx context.Context, open KubeletLog, since time.Time) (<-chan string, func(), error) {
	if open == nil {
		return nil, nil, errors.New("no kubelet log to follow")
	}
	rc, err := open(ctx, since)
	if err != nil {
		return nil, nil, fmt.Errorf("follow the kubelet's log: %w", err)
	}
	lines := make(chan string, 256)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(rc)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	return lines, func() { rc.Close() }, nil
}

// KubeletStrategy is the kubelet alone: detection is its eviction
// manager's decision (the klog time of "attempting to reclaim" memory),
// the kill the hog container's end as the trial sees it.
type KubeletStrategy struct {
	log   KubeletLog
	ready chan struct{}
}

// Name implements EvictionStrategy.
func (*KubeletStrategy) Name() string { return StrategyKubeletReal }

// Owner implements owned.
func (*KubeletStrategy) Owner() string { return OwnerKubelet }

// Ready implements readier.
func (s *KubeletStrategy) Ready() <-chan struct{} { return s.ready }

// observesEnd implements endObserver.
func (*KubeletStrategy) observesEnd() bool { return true }

// Run implements EvictionStrategy.
func (s *KubeletStrategy) Run(ctx context.Context, env *TrialEnv) error {
	since := time.Now()
	lines, closeLog, err := followKubelet(ctx, s.log, since)
	if err != nil {
		return err
	}
	defer closeLog()
	close(s.ready)
	f := &kubeletFollower{env: env, since: since}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case l, ok := <-lines:
			if !ok {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return errors.New("kubelet: its log ended")
			}
			f.line(l)
		}
	}
}

// GuardEviction is one eviction decision of nodeguard guard, from its
// JSON log's "evict pod" line.
type GuardEviction struct {
	Victim    string
	Signal    string
	Threshold string
	Observed  float64
	// ObservedAt is the snapshot the decision was confirmed on: the
	// decision's time less its staleness, the decision's time being the
	// line's less the kill stage (the line is written when Evict
	// returned). KillSent is the line's time.
	ObservedAt, KillSent time.Time
	DryRun               bool
}

// guardLine is the fields of a guard log line the race reads (slog's
// JSON: durations in nanoseconds).
type guardLine struct {
	Time        time.Time `json:"time"`
	Level       string    `json:"level"`
	Msg         string    `json:"msg"`
	Victim      string    `json:"victim"`
	Signal      string    `json:"signal"`
	Threshold   string    `json:"threshold"`
	Observed    float64   `json:"observed"`
	DryRun      bool      `json:"dry_run"`
	Staleness   *int64    `json:"staleness"`
	KillLatency *int64    `json:"kill_latency"`
}

// ParseGuardEviction reads a guard log line; ok is false for any line but
// a carried-out "evict pod" decision. A decision line without its time,
// victim, staleness or kill latency is malformed.
func ParseGuardEviction(line string) (GuardEviction, bool, error) {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "{") {
		return GuardEviction{}, false, nil
	}
	var l guardLine
	if err := json.Unmarshal([]byte(line), &l); err != nil {
		return GuardEviction{}, false, nil // not one of its JSON lines
	}
	if l.Msg != "evict pod" {
		return GuardEviction{}, false, nil
	}
	if l.Time.IsZero() || l.Victim == "" || l.Staleness == nil || l.KillLatency == nil {
		return GuardEviction{}, false, fmt.Errorf("guard's evict pod line without time, victim, staleness or kill_latency: %w: %.200s", ErrMalformedEvent, line)
	}
	decided := l.Time.Add(-time.Duration(*l.KillLatency))
	return GuardEviction{Victim: l.Victim, Signal: l.Signal, Threshold: l.Threshold, Observed: l.Observed,
		ObservedAt: decided.Add(-time.Duration(*l.Staleness)), KillSent: l.Time, DryRun: l.DryRun}, true, nil
}

// KubeletGuardStrategy is the kubelet with nodeguard guard beside it:
// the guard is started for the trial (it is ready before the hog
// starts) and stopped after; whichever decides first detects, and the
// guard's kill is its own report, the kubelet's the hog's end.
type KubeletGuardStrategy struct {
	log   KubeletLog
	guard GuardStarter
	ready chan struct{}
}

// Name implements EvictionStrategy.
func (*KubeletGuardStrategy) Name() string { return StrategyKubeletGuard }

// Owner implements owned.
func (*KubeletGuardStrategy) Owner() string { return OwnerKubelet }

// Ready implements readier.
func (s *KubeletGuardStrategy) Ready() <-chan struct{} { return s.ready }

// observesEnd implements endObserver.
func (*KubeletGuardStrategy) observesEnd() bool { return true }

// Run implements EvictionStrategy.
func (s *KubeletGuardStrategy) Run(ctx context.Context, env *TrialEnv) (retErr error) {
	if s.guard == nil {
		return errors.New("kubelet+guard: no way to start nodeguard guard")
	}
	since := time.Now()
	klines, closeLog, err := followKubelet(ctx, s.log, since)
	if err != nil {
		return err
	}
	defer closeLog()
	glines, stop, err := s.guard(ctx)
	if err != nil {
		return fmt.Errorf("kubelet+guard: start nodeguard guard: %w", err)
	}
	defer func() {
		if err := stop(); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("kubelet+guard: stop nodeguard guard: %w", err))
		}
	}()
	close(s.ready)
	f := &kubeletFollower{env: env, since: since}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case l, ok := <-klines:
			if !ok {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return errors.New("kubelet+guard: the kubelet's log ended")
			}
			f.line(l)
		case l, ok := <-glines:
			if !ok {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return errors.New("kubelet+guard: nodeguard guard exited")
			}
			ev, ok, err := ParseGuardEviction(l)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			if ev.DryRun {
				env.Log.Warn("guard decided in dry run", "victim", ev.Victim)
				continue
			}
			env.Detected(ev.ObservedAt)
			env.AgentEvicted(AgentEviction{Actor: "guard", Victim: ev.Victim, Signal: ev.Signal, Threshold: ev.Threshold,
				Observed: ev.Observed, ObservedAt: ev.ObservedAt, KillSent: ev.KillSent})
		}
	}
}

// NodeModeStrategy is nodeguard in node mode: its own eviction manager,
// followed through its event log as the nodeguard strategy follows the
// agent's.
type NodeModeStrategy struct{ AgentStrategy }

// Name implements EvictionStrategy.
func (*NodeModeStrategy) Name() string { return StrategyNodeguardNode }

// Owner implements owned.
func (*NodeModeStrategy) Owner() string { return OwnerNodeguard }

// observesEnd implements endObserver: its kills are timed by the agent,
// yet the hog's end is kept for comparison.
func (*NodeModeStrategy) observesEnd() bool { return true }
