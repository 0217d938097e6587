// The OOM race, run by RunEviction: its inputs, the loop over rates, trials
// and strategies, and the clean-up after each trial. The stages live beside
// it: eviction_background.go (setup), eviction_trial.go (one trial),
// eviction_truth.go (ground truth), eviction_report.go (report).

package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/api"
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
	Cgroups *kubepods.Cgroups
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

// errStrategyReturned: the strategy's Run returned while its trial ran.
var errStrategyReturned = errors.New("strategy returned")

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
	return errors.Is(err, lifecycle.ErrNotFound) || errors.Is(err, api.ErrNotFound) || apierrors.IsNotFound(err)
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
