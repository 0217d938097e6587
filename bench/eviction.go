package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/cgstat"
)

// The eviction benchmark ("the OOM race") measures how soon a strategy
// notices that a pod cgroup root runs out of memory, and whether its
// eviction lands before the kernel's OOM killer does. See RunEviction.

// EvictionStrategy is one way of detecting memory pressure on the pod root.
// Run watches env until ctx ends (then it returns, with ctx.Err() or nil);
// when its signal says "evict", it calls env.Detected with the time of the
// observation that crossed, then env.Evict. A strategy that is the
// agent's own eviction manager (AgentStrategy) evicts nothing itself: it
// reports what the agent did through env.AgentEvicted. Any other error it
// returns aborts the benchmark.
type EvictionStrategy interface {
	Name() string
	Run(ctx context.Context, env *TrialEnv) error
}

// agentEvictor is implemented by a strategy whose evictions are the
// agent's own: RunEviction runs its trials on an agent with its eviction
// manager on, and every other strategy's on one with it off.
type agentEvictor interface {
	EvictsThroughAgent() bool
}

// evictsThroughAgent reports whether s is the agent's own eviction
// manager.
func evictsThroughAgent(s EvictionStrategy) bool {
	a, ok := s.(agentEvictor)
	return ok && a.EvictsThroughAgent()
}

// TrialEnv is what a strategy sees of one trial.
type TrialEnv struct {
	// PodRoot is the pod cgroup root (kubepods) as the kubepods Manager
	// names it; Dirs are its directories, one per mounted hierarchy.
	PodRoot string
	Dirs    []cgroups.Dir
	// Budget is the pod root's hard memory limit (node allocatable here),
	// Threshold the eviction threshold on allocatableMemory.available
	// (budget - working set), both in bytes.
	Budget, Threshold uint64
	// Evict is the eviction action every baseline shares: rank the
	// running pods as the kubelet does for memory, SIGKILL the first
	// through its pod cgroup, then delete it through the agent's API. It
	// returns the victim as "namespace/name".
	Evict func(ctx context.Context, reason string) (victim string, err error)
	// Pods lists the running pods with their memory requests and working
	// sets, as the ranking sees them.
	Pods func() ([]EvictionCandidate, error)
	// Detected records when the strategy's signal crossed: the time of
	// the observation that crossed, not when Detected is called. Only
	// the first call of a trial counts.
	Detected func(at time.Time)
	// Agent is the event log of the agent the pods run on (nil when they
	// run on an in-process pod manager), and AgentEvicted records an
	// eviction the agent carried out itself.
	Agent        AgentEvents
	AgentEvicted func(AgentEviction)
	Log          *slog.Logger
	// Rand is the trial's random source (seeded from the run's seed), for
	// a poller's phase.
	Rand *rand.Rand
}

// MemoryDir returns the pod root's directory in the hierarchy that has the
// memory controller.
func (e *TrialEnv) MemoryDir() (cgroups.Dir, error) {
	return memoryDir(e.Dirs)
}

// ReadPodRoot reads the pod root's memory usage and inactive file pages as
// cAdvisor does for the kubelet (cgstat.ReadCgroupMemoryV1 or V2).
func (e *TrialEnv) ReadPodRoot() (cgstat.CgroupMemory, error) {
	d, err := e.MemoryDir()
	if err != nil {
		return cgstat.CgroupMemory{}, err
	}
	return readCgroupMemory(d)
}

func memoryDir(dirs []cgroups.Dir) (cgroups.Dir, error) {
	for _, d := range dirs {
		if d.Hierarchy.Has("memory") {
			return d, nil
		}
	}
	return cgroups.Dir{}, errors.New("no directory in a hierarchy with the memory controller")
}

func readCgroupMemory(d cgroups.Dir) (cgstat.CgroupMemory, error) {
	if d.Hierarchy.V2() {
		return cgstat.ReadCgroupMemoryV2(d.Path)
	}
	return cgstat.ReadCgroupMemoryV1(d.Path)
}

// ErrStrategyNotRegistered: a strategy was asked for by a name nobody
// registered.
var ErrStrategyNotRegistered = errors.New("not registered")

// EvictionStrategies maps strategy names to constructors. Each trial gets a
// fresh strategy from its constructor.
type EvictionStrategies struct {
	m map[string]func() EvictionStrategy
}

// The built-in strategies' names.
const (
	StrategyNodeguard    = "nodeguard"
	StrategyKubelet      = "kubelet"
	StrategyKubeletMemcg = "kubelet-memcg"
	StrategyPoll1s       = "poll1s"
	StrategyPSI          = "psi"
)

// DefaultStrategyNames is the order strategies are run and reported in.
// StrategyKubeletMemcg is in it only where the memory controller is on
// cgroup v1 (see DefaultStrategies).
var DefaultStrategyNames = []string{StrategyNodeguard, StrategyKubelet, StrategyKubeletMemcg, StrategyPoll1s, StrategyPSI}

// DefaultStrategies is DefaultStrategyNames for a host whose memory
// controller is on cgroup v2 (v2 true) or v1: the kubelet has no memcg
// notifier on v2, so that baseline exists only on v1.
func DefaultStrategies(v2 bool) []string {
	out := slices.Clone(DefaultStrategyNames)
	if v2 {
		out = slices.DeleteFunc(out, func(s string) bool { return s == StrategyKubeletMemcg })
	}
	return out
}

// NewEvictionStrategies returns the built-in strategies: nodeguard (the
// agent's own eviction manager, followed through its event log), kubelet
// (a 10 s poller), kubelet-memcg (the kubelet with its v1 memcg
// notifier), poll1s (a 1 s poller) and psi (a PSI trigger).
func NewEvictionStrategies() *EvictionStrategies {
	s := &EvictionStrategies{m: map[string]func() EvictionStrategy{}}
	s.Register(StrategyNodeguard, func() EvictionStrategy { return NewAgentStrategy() })
	s.Register(StrategyKubelet, func() EvictionStrategy { return NewPollStrategy(StrategyKubelet, KubeletHousekeeping) })
	s.Register(StrategyKubeletMemcg, func() EvictionStrategy { return NewKubeletMemcgStrategy(KubeletHousekeeping) })
	s.Register(StrategyPoll1s, func() EvictionStrategy { return NewPollStrategy(StrategyPoll1s, time.Second) })
	s.Register(StrategyPSI, func() EvictionStrategy { return NewPSIStrategy() })
	return s
}

// Register adds (or replaces) the strategy called name.
func (s *EvictionStrategies) Register(name string, f func() EvictionStrategy) {
	s.m[name] = f
}

// New returns a fresh strategy called name, or an error matching
// ErrStrategyNotRegistered.
func (s *EvictionStrategies) New(name string) (EvictionStrategy, error) {
	f, ok := s.m[name]
	if !ok {
		return nil, fmt.Errorf("strategy %s %w (have %s)", name, ErrStrategyNotRegistered, strings.Join(s.Names(), ", "))
	}
	return f(), nil
}

// Names lists the registered strategies, sorted.
func (s *EvictionStrategies) Names() []string {
	out := make([]string, 0, len(s.m))
	for n := range s.m {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// ParseThreshold reads an eviction threshold value as the kubelet's
// --eviction-hard takes it: a quantity ("100Mi") or a percentage of the
// budget ("10%").
func ParseThreshold(s string, budget uint64) (uint64, error) {
	s = strings.TrimSpace(s)
	if p, ok := strings.CutSuffix(s, "%"); ok {
		var pct float64
		if _, err := fmt.Sscan(p, &pct); err != nil || pct <= 0 || pct >= 100 {
			return 0, fmt.Errorf("threshold %q: want a percentage in (0, 100)", s)
		}
		return uint64(float64(budget) * pct / 100), nil
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, fmt.Errorf("threshold %q: %w", s, err)
	}
	if q.Sign() <= 0 || uint64(q.Value()) >= budget {
		return 0, fmt.Errorf("threshold %q: want a positive quantity below the budget (%d bytes)", s, budget)
	}
	return uint64(q.Value()), nil
}

// ParseBytes reads a positive Kubernetes quantity ("1Gi") as bytes.
func ParseBytes(s string) (uint64, error) {
	q, err := resource.ParseQuantity(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	if q.Sign() <= 0 {
		return 0, fmt.Errorf("size %q: want a positive quantity", s)
	}
	return uint64(q.Value()), nil
}

// ParseRates reads a comma-separated list of rates ("50Mi/s,1Gi/s"; the
// "/s" is optional) as bytes per second.
func ParseRates(s string) ([]uint64, error) {
	var out []uint64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSuffix(strings.TrimSpace(f), "/s")
		if f == "" {
			continue
		}
		v, err := ParseBytes(f)
		if err != nil {
			return nil, fmt.Errorf("rate: %w", err)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("rates %q: none given", s)
	}
	return out, nil
}

// FormatBytes writes n in the largest binary unit it reaches, without a
// fraction when the unit divides it ("200Mi", "1Gi", "102.4Mi"), or in
// bytes below 1Ki.
func FormatBytes(n uint64) string {
	for _, u := range []struct {
		s string
		v uint64
	}{{"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if n >= u.v {
			if n%u.v == 0 {
				return fmt.Sprintf("%d%s", n/u.v, u.s)
			}
			return fmt.Sprintf("%.1f%s", float64(n)/float64(u.v), u.s)
		}
	}
	return fmt.Sprintf("%d", n)
}

// FormatRate writes a rate as "200Mi/s".
func FormatRate(r uint64) string { return FormatBytes(r) + "/s" }

// hogLogPath is the CRI log of a pod's container under a lifecycle
// manager's log directory (RootDir/logs): <ns>_<name>_<uid>/<container>/0.log.
func hogLogPath(logDir, namespace, name string, uid types.UID, container string) string {
	return filepath.Join(logDir, namespace+"_"+name+"_"+string(uid), container, "0.log")
}
