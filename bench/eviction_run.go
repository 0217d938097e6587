package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/qos"
	"github.com/nodeguard/nodeguard/pressure/psi"
)

// EvictionPods is the pod manager as the eviction benchmark drives it: the
// agent's API (APIPods), or a lifecycle.Manager in the same process. Delete
// of a pod that does not exist returns an error wrapping
// lifecycle.ErrNotFound or api.ErrNotFound.
type EvictionPods interface {
	Apply(ctx context.Context, pods []*corev1.Pod, source string) ([]*corev1.Pod, error)
	Delete(ctx context.Context, namespace, name string) error
	Wait(ctx context.Context, namespace, name string, pred func(*corev1.Pod, bool) bool) error
	List(ctx context.Context) ([]*corev1.Pod, error)
}

// EvictionRuntime is what the benchmark acts on: the pods, the pod cgroups
// (a kubepods Manager with the agent's driver and root, for names,
// directories and kills: the agent makes and limits them; the pod root is
// its kubepods, whose memory limit must already be the budget), the pods'
// container log directory (the agent's rootDir/logs) and the agent the pods
// run on. Without an Agent (pods run by an in-process lifecycle.Manager)
// only the baselines can race.
type EvictionRuntime struct {
	Pods    EvictionPods
	Cgroups *kubepods.Manager
	LogDir  string
	Agent   EvictionAgent
}

// Defaults of the eviction benchmark, each with its reason.
const (
	// DefaultEvictionBudget stands in for node allocatable: large enough
	// that 50 MiB/s takes ~15 s to cross, small enough for a 2-core VM.
	DefaultEvictionBudget = 1 << 30
	// DefaultEvictionThreshold is 10% of the budget, the kubelet-style
	// hard threshold on allocatableMemory.available.
	DefaultEvictionThreshold = "10%"
	// DefaultEvictionRates span a slow leak (50 MiB/s) to the fastest a
	// core faults in 4 KiB pages here (~2 GiB/s).
	DefaultEvictionRates = "50Mi/s,200Mi/s,1Gi/s,2Gi/s"
	// QuickEvictionRates and QuickEvictionTrials: the CI run.
	QuickEvictionRates  = "200Mi/s,1Gi/s"
	QuickEvictionTrials = 2
	// hogDelay: the hog prints its first line, then waits this long
	// before allocating; the baseline is read in between (tailing the
	// log every tailPoll, so with room for a loaded machine).
	hogDelay = 1 * time.Second
	tailPoll = 5 * time.Millisecond
	// hogStartTimeout bounds apply -> first progress line (sandbox and
	// container start measured at 200-450 ms).
	hogStartTimeout = 60 * time.Second
	// releasePoll is how often the pod root is read after the kill, and
	// oomPoll how often the subtree's oom_kill counters are summed (a
	// few dozen small reads each time).
	releasePoll = time.Millisecond
	oomPoll     = 2 * time.Millisecond
	// afterOOMWait: after the kernel's OOM kill, how long to wait for the
	// hog to be gone and memory back before ending the trial anyway.
	afterOOMWait = 5 * time.Second
	// minTrialTimeout and trialTimeoutFactor: a trial ends at
	// max(20 s, 2.5 * budget / rate) even if nothing happened.
	minTrialTimeout    = 20 * time.Second
	trialTimeoutFactor = 2.5
	// settle*: between trials the pod root must hold still (within
	// settleSlack over settleSamples reads settlePoll apart) below the
	// threshold line by settleMargin, for at most settleTimeout.
	settlePoll    = 100 * time.Millisecond
	settleSamples = 3
	settleSlack   = 2 << 20
	settleMargin  = 8 << 20
	settleTimeout = 60 * time.Second
	// psiQuiet: no new memory stall for longer than the longest trigger
	// window used (2 s, the unprivileged step) plus its 2 s tick.
	psiQuiet = 4 * time.Second
	// podTimeout bounds waiting for a pod to run or to be gone.
	podTimeout = 90 * time.Second
	// strategyStopTimeout bounds a strategy's return after its ctx ends.
	strategyStopTimeout = 10 * time.Second
	// cleanupTimeout bounds the final removal of every benchmark pod.
	cleanupTimeout = 3 * time.Minute
	// evictionNamespace holds every pod of the benchmark.
	evictionNamespace = "bench-eviction"
	// hogContainer is the hog pod's container.
	hogContainer = "hog"
)

// EvictionConfig chooses the scenario.
type EvictionConfig struct {
	Budget, Threshold uint64
	Rates             []uint64
	Trials            int
	Strategies        []string
	// Step is the hog's allocation step (and progress granularity).
	Step uint64
	// HogImage and BusyboxImage are image references the runtime has.
	HogImage, BusyboxImage string
	// Background pods run through every trial; nil means
	// DefaultEvictionBackground. Give an empty non-nil slice for none.
	Background []*corev1.Pod
	// Seed makes the pollers' phases reproducible.
	Seed     uint64
	Progress io.Writer
	Log      *slog.Logger
}

// TrialTimeout is max(20 s, 2.5 * budget / rate).
func TrialTimeout(budget, rate uint64) time.Duration {
	d := time.Duration(trialTimeoutFactor * float64(budget) / float64(rate) * float64(time.Second))
	return max(minTrialTimeout, d)
}

func quantity(s string) resource.Quantity { return resource.MustParse(s) }

// DefaultEvictionBackground is the pods that share the budget with the
// hog: every QoS class, idle and busy. Busy pods run the hog in steady
// mode (hold N MiB, rewrite every page every 20 ms).
//
//	g-idle, g-busy    Guaranteed, 48Mi (busy holds 32Mi)
//	b-idle, b-busy    Burstable, requests 16Mi, limits 96Mi (busy holds 40Mi)
//	be-idle-1, -2     BestEffort, idle
func DefaultEvictionBackground(busybox, hog string) []*corev1.Pod {
	zero := int64(0)
	pod := func(name string, image string, cmd []string, res corev1.ResourceRequirements) *corev1.Pod {
		return &corev1.Pod{
			TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: evictionNamespace},
			Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: &zero,
				Containers:                    []corev1.Container{{Name: "main", Image: image, Command: cmd, Resources: res}},
			},
		}
	}
	sleep := []string{"sleep", "86400"}
	steady := func(n string) []string { return []string{"/hog", "--steady", n} }
	guaranteed := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceMemory: quantity("48Mi"), corev1.ResourceCPU: quantity("100m")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: quantity("48Mi"), corev1.ResourceCPU: quantity("100m")},
	}
	burstable := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceMemory: quantity("16Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: quantity("96Mi")},
	}
	return []*corev1.Pod{
		pod("g-idle", busybox, sleep, guaranteed),
		pod("g-busy", hog, steady("32Mi"), guaranteed),
		pod("b-idle", busybox, sleep, burstable),
		pod("b-busy", hog, steady("40Mi"), burstable),
		pod("be-idle-1", busybox, sleep, corev1.ResourceRequirements{}),
		pod("be-idle-2", busybox, sleep, corev1.ResourceRequirements{}),
	}
}

// hogPod is the trial's BestEffort hog: allocate at rate in steps up to the
// budget (it is OOM-killed or evicted before), never restarted.
func hogPod(name, image string, rate, step, budget uint64) *corev1.Pod {
	zero := int64(0)
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: evictionNamespace},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &zero,
			RestartPolicy:                 corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: hogContainer, Image: image, Command: []string{"/hog",
				"--rate", strconv.FormatUint(rate, 10), "--step", strconv.FormatUint(step, 10),
				"--max", strconv.FormatUint(budget, 10), "--delay", hogDelay.String()}}},
		},
	}
}

// hogName names a trial's hog pod: hog-<rate>-<strategy>-<trial>, DNS-1123.
func hogName(rate uint64, strategy string, trial int) string {
	clean := func(s string) string {
		var b strings.Builder
		for _, r := range strings.ToLower(s) {
			if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
				b.WriteRune(r)
			} else {
				b.WriteByte('-')
			}
		}
		return strings.Trim(b.String(), "-")
	}
	return fmt.Sprintf("hog-%s-%s-%d", clean(FormatBytes(rate)), clean(strategy), trial)
}

// RunEviction runs the OOM race: with the pod root's memory limit at the
// budget and the background pods running, for every rate, trial and
// strategy (strategies innermost, so that drift touches all alike) it
// starts the strategy, starts a hog, reads the baseline, and watches until
// the hog's memory is released after an eviction, the kernel's OOM killer
// ended it, or the trial timed out; then it deletes the hog, restores any
// background pod that was evicted, and waits for the pod root to settle.
//
// With an Agent, a trial of the agent's own strategy (nodeguard) runs on an
// agent started afresh with its eviction manager on, and the baselines'
// trials on one with it off (restarted only when the mode changes): a
// restart adopts the running pods. Fresh for every nodeguard trial because
// the agent, as the kubelet, keeps MemoryPressure for
// evictionPressureTransitionPeriod (5 min) after an eviction and refuses
// BestEffort pods meanwhile: the next trial's hog.
//
// Every trial is returned, failed or not; the error is the first that
// stopped the run. It removes the pods it made; the pod root and its limit
// stay (they belong to the caller's cgroup root).
func RunEviction(ctx context.Context, rt EvictionRuntime, reg *EvictionStrategies, cfg EvictionConfig) (_ []EvictionTrial, retErr error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.Budget == 0 || cfg.Threshold == 0 || cfg.Threshold >= cfg.Budget || cfg.Trials <= 0 || len(cfg.Rates) == 0 || cfg.Step == 0 {
		return nil, fmt.Errorf("eviction benchmark: want budget > threshold > 0, trials > 0, a rate and a step (have %+v)", cfg)
	}
	for _, s := range cfg.Strategies {
		if _, err := reg.New(s); err != nil {
			return nil, fmt.Errorf("eviction benchmark: %w", err)
		}
	}
	if len(cfg.Strategies) == 0 {
		return nil, errors.New("eviction benchmark: no strategy")
	}
	if cfg.Background == nil {
		cfg.Background = DefaultEvictionBackground(cfg.BusyboxImage, cfg.HogImage)
	}
	if rt.Agent == nil {
		for _, s := range cfg.Strategies {
			if st, _ := reg.New(s); evictsThroughAgent(st) {
				return nil, fmt.Errorf("eviction benchmark: strategy %s is the agent's own, and the pods run on no agent", s)
			}
		}
	}
	podRoot, err := rt.Cgroups.Kubepods()
	if err != nil {
		return nil, err
	}
	r := &evictionRun{rt: rt, cfg: cfg, reg: reg, podRoot: podRoot, background: map[string]*corev1.Pod{}}
	// The agent makes the pod root and sets node allocatable on it: the
	// budget is the pod root's hard limit, so a runaway hog is OOM-killed
	// by the kernel inside it, never anywhere else.
	if err := r.agentFor(ctx, cfg.Strategies[0]); err != nil {
		return nil, err
	}
	if r.dirs, err = rt.Cgroups.Dirs(podRoot); err != nil {
		return nil, err
	}
	if r.memDir, err = memoryDir(r.dirs); err != nil {
		return nil, err
	}
	if err := checkLimit(r.memDir, cfg.Budget); err != nil {
		return nil, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if err := r.removeAll(cctx); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("eviction benchmark: clean up: %w", err))
		}
	}()
	progressf(cfg.Progress, "eviction: budget %s, threshold %s, %d background pods", FormatBytes(cfg.Budget), FormatBytes(cfg.Threshold), len(cfg.Background))
	if err := r.startBackground(ctx); err != nil {
		return nil, err
	}
	total := len(cfg.Rates) * cfg.Trials * len(cfg.Strategies)
	var trials []EvictionTrial
	i := 0
	for _, rate := range cfg.Rates {
		for k := 1; k <= cfg.Trials; k++ {
			for _, s := range cfg.Strategies {
				i++
				if err := r.agentFor(ctx, s); err != nil {
					return trials, err
				}
				r.agentFresh = false
				t, err := r.trial(ctx, rate, s, k, i)
				trials = append(trials, t)
				progressf(cfg.Progress, "trial %d/%d rate %s strategy %s: %s", i, total, FormatRate(rate), s, t.Outcome())
				if err != nil {
					return trials, fmt.Errorf("trial %d (rate %s, strategy %s, #%d): %w", i, FormatRate(rate), s, k, err)
				}
			}
		}
	}
	return trials, nil
}

// checkLimit verifies that the pod root's limit is the budget (the kernel
// rounds a v1 limit down to whole pages).
func checkLimit(d cgroups.Dir, budget uint64) error {
	b, err := os.ReadFile(filepath.Join(d.Path, d.Hierarchy.MemoryLimitFile()))
	if err != nil {
		return fmt.Errorf("read the budget back: %w", err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v > budget || budget-v >= uint64(os.Getpagesize()) {
		return fmt.Errorf("pod root %s limit reads %q, want %d", d.Path, bytes.TrimSpace(b), budget)
	}
	return nil
}

type evictionRun struct {
	rt         EvictionRuntime
	cfg        EvictionConfig
	reg        *EvictionStrategies
	podRoot    string
	dirs       []cgroups.Dir
	memDir     cgroups.Dir
	background map[string]*corev1.Pod // by key, the specs to restore
	hogs       []string               // names of hogs not yet known gone
	// The agent's state: started, in which mode, and whether no trial
	// has run on it since it started evicting.
	agentStarted, agentEvicting, agentFresh bool
}

// agentFor makes sure the agent runs in the mode the strategy needs
// (RunEviction says when it restarts it), and that the background pods run
// on it again after a restart.
func (r *evictionRun) agentFor(ctx context.Context, strategy string) error {
	if r.rt.Agent == nil {
		return nil
	}
	s, err := r.reg.New(strategy)
	if err != nil {
		return err
	}
	want := evictsThroughAgent(s)
	if r.agentStarted && r.agentEvicting == want && (!want || r.agentFresh) {
		return nil
	}
	mode := "eviction off"
	if want {
		mode = "eviction on"
	}
	t0 := time.Now()
	if err := r.rt.Agent.Restart(ctx, want); err != nil {
		return fmt.Errorf("eviction benchmark: (re)start the agent with %s: %w", mode, err)
	}
	r.agentStarted, r.agentEvicting, r.agentFresh = true, want, want
	for _, p := range r.cfg.Background {
		if _, ok := r.background[evictionNamespace+"/"+p.Name]; !ok {
			continue // not started yet
		}
		if err := r.wait(ctx, p.Name, "ran on the restarted agent", running); err != nil {
			return err
		}
	}
	progressf(r.cfg.Progress, "agent (re)started with %s in %s", mode, time.Since(t0).Round(time.Millisecond))
	return nil
}

func (r *evictionRun) workingSet() (uint64, error) {
	m, err := readCgroupMemory(r.memDir)
	if err != nil {
		return 0, err
	}
	return m.WorkingSet(), nil
}

func running(p *corev1.Pod, ok bool) bool { return ok && p.Status.Phase == corev1.PodRunning }
func gone(_ *corev1.Pod, ok bool) bool    { return !ok }

func (r *evictionRun) wait(ctx context.Context, name, what string, pred func(*corev1.Pod, bool) bool) error {
	wctx, cancel := context.WithTimeout(ctx, podTimeout)
	defer cancel()
	if err := r.rt.Pods.Wait(wctx, evictionNamespace, name, pred); err != nil {
		return fmt.Errorf("pod %s/%s never %s: %w", evictionNamespace, name, what, err)
	}
	return nil
}

func (r *evictionRun) startBackground(ctx context.Context) error {
	if len(r.cfg.Background) == 0 {
		return nil
	}
	if _, err := r.rt.Pods.Apply(ctx, r.cfg.Background, lifecycle.SourceAPI); err != nil {
		return fmt.Errorf("start background pods: %w", err)
	}
	for _, p := range r.cfg.Background {
		r.background[evictionNamespace+"/"+p.Name] = p
	}
	for _, p := range r.cfg.Background {
		if err := r.wait(ctx, p.Name, "ran", running); err != nil {
			return err
		}
	}
	return nil
}

// settle waits until the pod root's working set holds still below the
// threshold line and, where the pod root has a memory.pressure file, until
// no memory stall has been added for psiQuiet: a stall of the previous
// trial still inside a PSI trigger's window would fire the next trial's
// trigger before its hog allocates anything.
func (r *evictionRun) settle(ctx context.Context) (uint64, error) {
	deadline := time.Now().Add(settleTimeout)
	line := r.cfg.Budget - r.cfg.Threshold
	pressure := pressureFile(r.dirs)
	var (
		hist       []uint64
		lastStall  time.Duration
		stallSince time.Time
	)
	for {
		ws, err := r.workingSet()
		if err != nil {
			return 0, err
		}
		quiet := true
		if pressure != "" {
			b, err := os.ReadFile(pressure)
			if err != nil {
				return 0, fmt.Errorf("read %s: %w", pressure, err)
			}
			st, err := psi.Parse(b, pressure)
			if err != nil {
				return 0, err
			}
			if st.Some.Total != lastStall || stallSince.IsZero() {
				lastStall, stallSince = st.Some.Total, time.Now()
			}
			quiet = time.Since(stallSince) >= psiQuiet
		}
		hist = append(hist, ws)
		if n := len(hist); n >= settleSamples {
			lo, hi := hist[n-settleSamples], hist[n-settleSamples]
			for _, v := range hist[n-settleSamples:] {
				lo, hi = min(lo, v), max(hi, v)
			}
			if hi-lo <= settleSlack && hi+settleMargin < line && quiet {
				return ws, nil
			}
		}
		if time.Now().After(deadline) {
			return ws, fmt.Errorf("pod root did not settle in %v: working set %s, line %s, memory stall quiet %v", settleTimeout, FormatBytes(ws), FormatBytes(line), quiet)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(settlePoll):
		}
	}
}

// pressureFile returns the pod root's cgroup2 memory.pressure, or "".
func pressureFile(dirs []cgroups.Dir) string {
	for _, d := range dirs {
		if d.Hierarchy.V2() {
			p := filepath.Join(d.Path, psi.Memory.CgroupFile())
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	return ""
}

// candidates lists the running pods with their memory.
func (r *evictionRun) candidates(ctx context.Context) ([]EvictionCandidate, error) {
	pods, err := r.rt.Pods.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	var out []EvictionCandidate
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		parent, err := r.rt.Cgroups.Parent(p)
		if err != nil {
			return nil, err
		}
		dirs, err := r.rt.Cgroups.Dirs(parent)
		if err != nil {
			return nil, err
		}
		d, err := memoryDir(dirs)
		if err != nil {
			return nil, err
		}
		m, err := readCgroupMemory(d)
		if cgroups.Gone(err) {
			continue // removed since List
		}
		if err != nil {
			return nil, fmt.Errorf("read pod %s/%s memory: %w", p.Namespace, p.Name, err)
		}
		req := qos.PodRequests(p)[corev1.ResourceMemory]
		c := EvictionCandidate{UID: p.UID, Namespace: p.Namespace, Name: p.Name, QOS: qos.Class(p), Priority: qos.Priority(p),
			MemoryRequest: req.Value(), MemoryUsage: int64(m.WorkingSet()), CgroupParent: parent}
		out = append(out, c)
	}
	return out, nil
}

// trialState is what one trial records; the strategy's goroutine and the
// monitor share it under mu.
type trialState struct {
	r      *evictionRun
	hogKey string
	oom    *oomCounter

	mu      sync.Mutex
	closed  bool
	t       EvictionTrial
	victims []string // keys, in order
	// agentKill: the first kill was the agent's, timed by the agent, so
	// whether the kernel's OOM killer came first is decided at the end
	// from the monitor's OOM polls: oomClear is the start of the last
	// poll that found no OOM kill, oomSeen the end of the first that
	// found one.
	agentKill         bool
	oomClear, oomSeen time.Time
}

func (s *trialState) detected(at time.Time) {
	if at.IsZero() {
		at = time.Now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed && s.t.Detected.IsZero() {
		s.t.Detected = at
	}
}

func (s *trialState) evict(ctx context.Context, reason string) (string, error) {
	pods, err := s.r.candidates(ctx)
	if err != nil {
		return "", fmt.Errorf("rank pods: %w", err)
	}
	if len(pods) == 0 {
		return "", errors.New("no running pod to evict")
	}
	v := RankMemory(pods)[0]
	return v.Key(), s.evictCandidate(ctx, v, reason)
}

// evictCandidate is the shared action: note whether the kernel's OOM
// killer already fired, SIGKILL the pod through its cgroup, delete it.
func (s *trialState) evictCandidate(ctx context.Context, v EvictionCandidate, reason string) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("trial is over")
	}
	s.mu.Unlock()
	oomFired, oomErr := s.oom.fired()
	start := time.Now()
	n, kerr := s.r.rt.Cgroups.Kill(v.CgroupParent)
	returned := time.Now()
	s.mu.Lock()
	if s.t.KillSent.IsZero() {
		s.t.KillSent, s.t.KillReturned = start, returned
		s.t.KernelOOMFirst = oomErr == nil && oomFired
		s.t.Reason = reason
	}
	s.t.Victims = append(s.t.Victims, v.Key())
	if v.Key() != s.hogKey {
		s.t.Collateral++
	}
	s.victims = append(s.victims, v.Key())
	s.mu.Unlock()
	s.r.cfg.Log.Info("evicted", "victim", v.Key(), "reason", reason, "killed", n,
		"usage_bytes", v.MemoryUsage, "request_bytes", v.MemoryRequest, "kill_seconds", returned.Sub(start).Seconds())
	derr := s.r.rt.Pods.Delete(ctx, v.Namespace, v.Name)
	return errors.Join(oomErr, kerr, derr)
}

// agentEvicted records an eviction the agent carried out: it killed the
// victim through its pod cgroup itself, and keeps it (Failed, Evicted)
// until the benchmark deletes it.
func (s *trialState) agentEvicted(ev AgentEviction) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if s.t.KillSent.IsZero() {
		s.t.KillSent, s.t.KillReturned = ev.KillSent, ev.KillSent
		s.t.Reason = ev.Reason()
		s.agentKill = true
	}
	s.t.Victims = append(s.t.Victims, ev.Victim)
	if ev.Victim != s.hogKey {
		s.t.Collateral++
	}
	s.victims = append(s.victims, ev.Victim)
	s.r.cfg.Log.Info("agent evicted", "victim", ev.Victim, "reason", ev.Reason(), "observed_at", ev.ObservedAt,
		"detect_seconds", ev.Detect.Seconds(), "decide_seconds", ev.Decide.Seconds(), "kill_seconds", ev.Kill.Seconds())
}

// agentOOMFirst decides, for a kill the agent timed, whether the kernel's
// OOM killer came first: yes when the kill was sent after the last OOM
// poll that found none began (an OOM kill between that poll and the kill
// cannot be ruled out, so it counts against the agent). It returns a note
// when the two fall within one poll.
func agentOOMFirst(killSent, oomClear, oomSeen time.Time) (first bool, note string) {
	if oomSeen.IsZero() || !killSent.After(oomClear) {
		return false, ""
	}
	if killSent.Before(oomSeen) {
		return true, "the agent's kill and the kernel's OOM kill fell within one OOM poll: counted as the OOM killer's"
	}
	return true, ""
}

func (r *evictionRun) trial(ctx context.Context, rate uint64, strategy string, k, index int) (EvictionTrial, error) {
	name := hogName(rate, strategy, k)
	st := &trialState{r: r, hogKey: evictionNamespace + "/" + name}
	st.t = EvictionTrial{Rate: rate, Strategy: strategy, Trial: k, Budget: r.cfg.Budget, Threshold: r.cfg.Threshold, Hog: st.hogKey}
	fail := func(err error) (EvictionTrial, error) {
		st.mu.Lock()
		st.closed = true
		st.t.Err = err.Error()
		t := st.t
		st.mu.Unlock()
		return t, err
	}
	if _, err := r.settle(ctx); err != nil {
		return fail(err)
	}
	strat, err := r.reg.New(strategy)
	if err != nil {
		return fail(err)
	}

	// The strategy runs before the hog exists, so that it is ready (a
	// watcher armed, a poller at its own phase) when allocation begins.
	sctx, stopStrategy := context.WithCancel(ctx)
	defer stopStrategy()
	env := &TrialEnv{
		PodRoot: r.podRoot, Dirs: r.dirs, Budget: r.cfg.Budget, Threshold: r.cfg.Threshold,
		Evict: st.evict, Pods: func() ([]EvictionCandidate, error) { return r.candidates(sctx) },
		Detected: st.detected, AgentEvicted: st.agentEvicted,
		Log:  r.cfg.Log.With("strategy", strategy, "trial", index),
		Rand: rand.New(rand.NewPCG(r.cfg.Seed, uint64(index))),
	}
	if r.rt.Agent != nil {
		env.Agent = r.rt.Agent
	}
	// Counters are read before the strategy can act.
	st.oom = &oomCounter{}
	var stratRes error
	stratDone := make(chan struct{})
	go func() { stratRes = strat.Run(sctx, env); close(stratDone) }()
	stopAndWait := func() {
		stopStrategy()
		<-stratDone
	}

	pods, err := r.rt.Pods.Apply(ctx, []*corev1.Pod{hogPod(name, r.cfg.HogImage, rate, r.cfg.Step, r.cfg.Budget)}, lifecycle.SourceAPI)
	if err != nil {
		stopAndWait()
		return fail(fmt.Errorf("start hog: %w", err))
	}
	r.hogs = append(r.hogs, name)
	hog := pods[0]
	tail := &logTail{path: hogLogPath(r.rt.LogDir, hog.Namespace, hog.Name, hog.UID, hogContainer)}
	defer tail.close()
	if err := r.waitReady(ctx, tail, name); err != nil {
		stopAndWait()
		return fail(err)
	}
	baseline, err := r.workingSet()
	baselineAt := time.Now()
	if err != nil {
		stopAndWait()
		return fail(err)
	}
	if err := st.oom.init(r.memDir); err != nil {
		stopAndWait()
		return fail(err)
	}
	hogParent, err := r.rt.Cgroups.Parent(hog)
	if err != nil {
		stopAndWait()
		return fail(err)
	}
	hogDirs, err := r.rt.Cgroups.Dirs(hogParent)
	if err != nil {
		stopAndWait()
		return fail(err)
	}
	hogPodMem, err := memoryDir(hogDirs)
	if err != nil {
		stopAndWait()
		return fail(err)
	}
	// The hog's own container cgroup, not the pod's (which holds the
	// sandbox's pause process until the pod is removed).
	hogMem, err := findLeaf(hogPodMem.Path, "hog")
	if err != nil {
		stopAndWait()
		return fail(err)
	}
	st.mu.Lock()
	st.t.Baseline, st.t.BaselineAt = baseline, baselineAt
	st.mu.Unlock()

	monErr := r.monitor(ctx, st, stratDone, hogMem, TrialTimeout(r.cfg.Budget, rate))
	stopStrategy()
	select {
	case <-stratDone:
		switch err := stratRes; {
		case errors.Is(monErr, errStrategyReturned):
			monErr = fmt.Errorf("strategy %s returned before its trial ended: %v", strategy, err)
		case err != nil && !errors.Is(err, context.Canceled) && monErr == nil:
			monErr = fmt.Errorf("strategy %s: %w", strategy, err)
		}
	case <-time.After(strategyStopTimeout):
		if monErr == nil {
			monErr = fmt.Errorf("strategy %s did not return %v after its context ended", strategy, strategyStopTimeout)
		}
	}
	st.mu.Lock()
	st.closed = true
	st.mu.Unlock()

	// Clean up: the hog goes (if no strategy took it), evicted background
	// pods come back. The log file stays readable through the open fd
	// after the pod's log directory is removed.
	cerr := r.removeHog(ctx, name)
	if cerr == nil {
		cerr = r.restore(ctx, st.victims)
	}
	lines, perr := tail.lines()
	var points []ProgressPoint
	if perr == nil {
		points, perr = ParseProgress(lines)
	}
	st.mu.Lock()
	t := st.t
	agentKill, oomClear, oomSeen := st.agentKill, st.oomClear, st.oomSeen
	st.mu.Unlock()
	var oomNote string
	if agentKill {
		t.KernelOOMFirst, oomNote = agentOOMFirst(t.KillSent, oomClear, oomSeen)
	}
	t.finish(points)
	if oomNote != "" {
		t.Note = strings.TrimPrefix(t.Note+"; "+oomNote, "; ")
	}
	if perr != nil {
		t.Err = perr.Error()
	}
	err = errors.Join(monErr, cerr, perr)
	if err != nil && t.Err == "" {
		t.Err = err.Error()
	}
	return t, err
}

// waitReady tails the hog's log until its first line ("<t> 0").
func (r *evictionRun) waitReady(ctx context.Context, tail *logTail, name string) error {
	deadline := time.Now().Add(hogStartTimeout)
	for {
		lines, err := tail.lines()
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if len(lines) > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			state := "unknown"
			pods, err := r.rt.Pods.List(ctx)
			if err != nil {
				state = "unknown: " + err.Error()
			}
			for _, p := range pods {
				if p.Namespace == evictionNamespace && p.Name == name {
					state = fmt.Sprintf("phase %s, %s %s", p.Status.Phase, p.Status.Reason, p.Status.Message)
					for _, cs := range p.Status.ContainerStatuses {
						state += fmt.Sprintf("; container %s: %+v", cs.Name, cs.State)
					}
				}
			}
			return fmt.Errorf("hog %s printed nothing in %v (%s; log %s)", name, hogStartTimeout, state, tail.path)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(tailPoll):
		}
	}
}

// monitor watches the trial until the memory is released after a kill
// that took the hog, the kernel's OOM killer has ended the hog, or the
// trial times out. Every tick it samples whether the pod root is below the
// threshold line (or the hog's cgroup gone): release is the first such
// sample at or after the kill, which for the agent's own kills is known
// only once its event arrives, after the fact.
func (r *evictionRun) monitor(ctx context.Context, st *trialState, stratDone <-chan struct{}, hogMem string, timeout time.Duration) error {
	line := r.cfg.Budget - r.cfg.Threshold
	deadline := time.Now().Add(timeout)
	rw, err := newReleaseWatch(r.memDir, hogMem, line)
	if err != nil {
		return err
	}
	defer rw.close()
	tick := time.NewTicker(releasePoll)
	defer tick.Stop()
	var lastOOMPoll time.Time
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-stratDone:
			return errStrategyReturned
		case <-tick.C:
		}
		now := time.Now()
		st.mu.Lock()
		oomAt := st.t.KernelOOM
		st.mu.Unlock()
		if oomAt.IsZero() && now.Sub(lastOOMPoll) >= oomPoll {
			lastOOMPoll = now
			fired, err := st.oom.fired()
			if err != nil {
				return err
			}
			seen := time.Now()
			st.mu.Lock()
			if fired {
				oomAt = now
				st.t.KernelOOM, st.oomSeen = now, seen
			} else {
				st.oomClear = now
			}
			st.mu.Unlock()
		}
		smp, err := rw.sample()
		if err != nil {
			return err
		}
		st.mu.Lock()
		killed, released := st.t.KillSent, st.t.Released
		if !killed.IsZero() && released.IsZero() {
			if at, ok := rw.releasedAfter(killed); ok {
				released, st.t.Released = at, at
			}
		}
		hogEvicted := slices.Contains(st.t.Victims, st.hogKey)
		st.mu.Unlock()
		if !killed.IsZero() || !oomAt.IsZero() {
			hogDead := smp.hogGone || procsEmpty(hogMem)
			switch {
			case !released.IsZero() && (hogEvicted || hogDead):
				return nil
			case !oomAt.IsZero() && hogDead && smp.below:
				return nil
			case !oomAt.IsZero() && now.Sub(oomAt) > afterOOMWait:
				return nil
			}
		}
		if now.After(deadline) {
			st.mu.Lock()
			st.t.TimedOut = true
			st.mu.Unlock()
			return nil
		}
	}
}

// releaseSample is one look at the pod root: at At, its working set was
// below the line, or the hog's container cgroup was gone.
type releaseSample struct {
	At      time.Time
	below   bool
	hogGone bool
}

func (s releaseSample) released() bool { return s.below || s.hogGone }

// releaseWatch samples the pod root for the release of a kill. A sample
// reads the usage counter (one pread of a descriptor kept open), and the
// working set (memory.stat) only when usage is at or above the line: the
// working set never exceeds usage. The samples are kept for the trial
// (at most one per millisecond).
type releaseWatch struct {
	mem     cgroups.Dir
	usage   *os.File
	hogMem  string
	line    uint64
	buf     []byte
	samples []releaseSample
}

func newReleaseWatch(mem cgroups.Dir, hogMem string, line uint64) (*releaseWatch, error) {
	name := "memory.usage_in_bytes"
	if mem.Hierarchy.V2() {
		name = "memory.current"
	}
	f, err := os.Open(filepath.Join(mem.Path, name))
	if err != nil {
		return nil, fmt.Errorf("watch the release: %w", err)
	}
	return &releaseWatch{mem: mem, usage: f, hogMem: hogMem, line: line, buf: make([]byte, 32)}, nil
}

func (w *releaseWatch) close() { w.usage.Close() }

func (w *releaseWatch) sample() (releaseSample, error) {
	n, err := w.usage.ReadAt(w.buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return releaseSample{}, fmt.Errorf("read %s: %w", w.usage.Name(), err)
	}
	usage, err := strconv.ParseUint(strings.TrimSpace(string(w.buf[:n])), 10, 64)
	if err != nil {
		return releaseSample{}, fmt.Errorf("read %s: %q: %w", w.usage.Name(), w.buf[:n], err)
	}
	below := usage < w.line
	if !below {
		m, err := readCgroupMemory(w.mem)
		if err != nil {
			return releaseSample{}, err
		}
		below = m.WorkingSet() < w.line
	}
	_, err = os.Stat(w.hogMem)
	s := releaseSample{At: time.Now(), below: below, hogGone: errors.Is(err, fs.ErrNotExist)}
	w.samples = append(w.samples, s)
	return s, nil
}

// releasedAfter is the first sample at or after kill that saw the memory
// released.
func (w *releaseWatch) releasedAfter(kill time.Time) (time.Time, bool) {
	return firstReleased(w.samples, kill)
}

// firstReleased returns the time of the first sample (in time order) at or
// after kill that saw the memory released.
func firstReleased(samples []releaseSample, kill time.Time) (time.Time, bool) {
	i, _ := slices.BinarySearchFunc(samples, kill, func(s releaseSample, t time.Time) int { return s.At.Compare(t) })
	for _, s := range samples[i:] {
		if s.released() {
			return s.At, true
		}
	}
	return time.Time{}, false
}

// findLeaf returns the cgroup directory beneath dir whose cgroup.procs
// holds a process named comm.
func findLeaf(dir, comm string) (string, error) {
	found := ""
	err := cgroups.Walk(dir, func(p string) error {
		pids, err := cgroups.Procs(p)
		if err != nil {
			return nil // removed meanwhile
		}
		for _, pid := range pids {
			c, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
			if err == nil && strings.TrimSpace(string(c)) == comm {
				found = p
				return fs.SkipAll
			}
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("find the %s process's cgroup beneath %s: %w", comm, dir, err)
	}
	if found == "" {
		return "", fmt.Errorf("find the %s process's cgroup beneath %s: none", comm, dir)
	}
	return found, nil
}

// errStrategyReturned: the strategy's Run returned while its trial ran.
var errStrategyReturned = errors.New("strategy returned")

// procsEmpty reports whether no process is left in the cgroup dir or
// beneath it.
func procsEmpty(dir string) bool {
	pids, _ := cgroups.TreeProcs(dir)
	return len(pids) == 0
}

func (r *evictionRun) removeHog(ctx context.Context, name string) error {
	if err := r.rt.Pods.Delete(ctx, evictionNamespace, name); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete hog: %w", err)
	}
	if err := r.wait(ctx, name, "went away", gone); err != nil {
		return err
	}
	for i, h := range r.hogs {
		if h == name {
			r.hogs = append(r.hogs[:i], r.hogs[i+1:]...)
			break
		}
	}
	return nil
}

func isNotFound(err error) bool {
	return errors.Is(err, lifecycle.ErrNotFound) || errors.Is(err, api.ErrNotFound)
}

// restore brings back the background pods a strategy evicted: a baseline
// deleted them already; the agent keeps its victims, Failed (Evicted),
// until they are deleted.
func (r *evictionRun) restore(ctx context.Context, victims []string) error {
	for _, key := range victims {
		spec, ok := r.background[key]
		if !ok {
			continue
		}
		if err := r.rt.Pods.Delete(ctx, evictionNamespace, spec.Name); err != nil && !isNotFound(err) {
			return fmt.Errorf("restore %s: delete: %w", key, err)
		}
		if err := r.wait(ctx, spec.Name, "went away", gone); err != nil {
			return err
		}
		if _, err := r.rt.Pods.Apply(ctx, []*corev1.Pod{spec}, lifecycle.SourceAPI); err != nil {
			return fmt.Errorf("restore %s: %w", key, err)
		}
		if err := r.wait(ctx, spec.Name, "ran again", running); err != nil {
			return err
		}
	}
	return nil
}

// removeAll deletes every pod of the benchmark and waits for each to go.
func (r *evictionRun) removeAll(ctx context.Context) error {
	pods, err := r.rt.Pods.List(ctx)
	if err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	var errs []error
	var names []string
	for _, p := range pods {
		if p.Namespace == evictionNamespace {
			names = append(names, p.Name)
			if err := r.rt.Pods.Delete(ctx, p.Namespace, p.Name); err != nil && !isNotFound(err) {
				errs = append(errs, err)
			}
		}
	}
	for _, n := range names {
		if err := r.wait(ctx, n, "went away", gone); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// logTail reads a growing file through one open descriptor, which keeps
// working after the file is unlinked.
type logTail struct {
	path string
	f    *os.File
	buf  []byte
}

// lines returns the stdout lines complete so far.
func (t *logTail) lines() ([]string, error) {
	if t.f == nil {
		f, err := os.Open(t.path)
		if err != nil {
			return nil, err
		}
		t.f = f
	}
	rd := bufio.NewReader(t.f)
	b, err := io.ReadAll(rd)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", t.path, err)
	}
	t.buf = append(t.buf, b...)
	return ParseCRILog(t.buf)
}

func (t *logTail) close() {
	if t.f != nil {
		t.f.Close()
	}
}

// oomCounter sums oom_kill over the pod root's subtree: v1 counts an OOM
// kill only in the victim's own memcg (memory.oom_control), so every
// descendant is read; v2's memory.events of the pod root is hierarchical.
type oomCounter struct {
	mu   sync.Mutex // init runs while a strategy may already evict
	v2   bool
	dirs []string
	// last is each directory's last count: a container cgroup removed
	// after its task was OOM-killed takes its count with it, so a
	// vanished directory keeps its last value.
	last map[string]uint64
	base uint64
}

func (o *oomCounter) init(root cgroups.Dir) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.v2 = root.Hierarchy.V2()
	o.dirs, o.last = nil, map[string]uint64{}
	if o.v2 {
		o.dirs = []string{root.Path}
	} else if err := cgroups.Walk(root.Path, func(p string) error {
		o.dirs = append(o.dirs, p)
		return nil
	}); err != nil {
		return fmt.Errorf("list the pod root's memory cgroups: %w", err)
	}
	n, err := o.sum()
	if err != nil {
		return err
	}
	o.base = n
	return nil
}

func (o *oomCounter) sum() (uint64, error) {
	file := "memory.oom_control"
	if o.v2 {
		file = "memory.events"
	}
	var total uint64
	for _, d := range o.dirs {
		b, err := os.ReadFile(filepath.Join(d, file))
		if cgroups.Gone(err) {
			total += o.last[d]
			continue
		}
		if err != nil {
			return 0, err
		}
		n, err := ParseOOMKill(b)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", filepath.Join(d, file), err)
		}
		o.last[d] = n
		total += n
	}
	return total, nil
}

// fired reports whether any OOM kill happened in the subtree since init.
func (o *oomCounter) fired() (bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.dirs == nil {
		return false, nil
	}
	n, err := o.sum()
	return err == nil && n > o.base, err
}

// ParseOOMKill reads the "oom_kill N" line of memory.oom_control (v1) or
// memory.events (v2). A file without one is malformed: every kernel since
// 4.13 writes it.
func ParseOOMKill(b []byte) (uint64, error) {
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), " ")
		if !ok || k != "oom_kill" {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("oom_kill %q: %w", v, err)
		}
		return n, nil
	}
	return 0, errors.New("no oom_kill line")
}
