package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeguard/nodeguard/cgroups/kubepods"
)

// Bounds of the race through the API server, each with its reason (under
// TCG a sandbox takes 2-7 s, the first with CNI up to 15 s, and every
// API round trip goes through qemu's user network).
const (
	// kubeHogDelay: the hog waits this long between its first line and
	// its first allocation: the baseline is read in between, and the
	// controller's replacement hog, once seen running, is removed before
	// it allocates anything.
	kubeHogDelay = 3 * time.Second
	// kubePodTimeout bounds a pod's start, deletion and the owner's sync
	// of either through the API server.
	kubePodTimeout = 3 * time.Minute
	// replacementTimeout bounds the wait for the controller's
	// replacement of an evicted hog to run.
	replacementTimeout = 2 * time.Minute
	// strategyReadyTimeout bounds a strategy's start (nodeguard guard:
	// its BPF programs load and it lists the kubelet's pods).
	strategyReadyTimeout = 3 * time.Minute
	// kubeStrategyStopTimeout bounds a strategy's return (nodeguard guard
	// stopping) after its trial.
	kubeStrategyStopTimeout = time.Minute
	// namespaceTimeout bounds the namespace's default ServiceAccount.
	namespaceTimeout = time.Minute
)

// KubeOwner runs the node's pods for a group of strategies: the kubelet,
// or nodeguard in node mode. The race takes the owner before its
// strategies' trials and releases it before the next owner's.
type KubeOwner interface {
	// Take makes it run the node (no other owner does), returning once
	// its Node is Ready and the pod root's limit is the budget.
	Take(ctx context.Context) error
	// Release stops it; the race removed its pods through the API
	// first.
	Release(ctx context.Context) error
	// LogDir is where its runtime writes the pods' container logs
	// (<ns>_<name>_<uid>/<container>/<n>.log beneath it).
	LogDir() string
}

// KubeRuntime is what the race through the API server acts on: the pods
// through the API server, the pod cgroups (a kubepods Manager with the
// owners' driver and root: names and reads only, nobody's pods are
// limited or killed by the race), and the owners by name (OwnerKubelet,
// OwnerNodeguard). An owner that is also AgentEvents is the agent of its
// strategies' trials (nodeguard-node).
type KubeRuntime struct {
	Pods    *KubePods
	Cgroups *kubepods.Cgroups
	Owners  map[string]KubeOwner
}

// endObserver is a strategy whose trials time the hog container's end:
// the kubelet reports no kill time.
type endObserver interface {
	observesEnd() bool
}

// KubeOwnerGroups splits strategies by owner, in the order each owner
// first appears, each group's strategies in their order.
func KubeOwnerGroups(reg *EvictionStrategies, strategies []string) ([]string, map[string][]string, error) {
	var order []string
	by := map[string][]string{}
	for _, s := range strategies {
		st, err := reg.New(s)
		if err != nil {
			return nil, nil, err
		}
		o := strategyOwner(st)
		if o == "" {
			return nil, nil, fmt.Errorf("strategy %s needs no owner of the node: not one of the race through the API server (%s)", s, strings.Join(DefaultKubeStrategies, ", "))
		}
		if !slices.Contains(order, o) {
			order = append(order, o)
		}
		by[o] = append(by[o], s)
	}
	return order, by, nil
}

// RunKubeEviction runs the OOM race on a node whose pods run through the
// API server: the same background pods and hogs as RunEviction's, bound
// to the node, the hog a Deployment of one replica. Strategies are run in
// groups by the owner they need (the kubelet's first when listed first):
// the owner is taken, the background pods started, then every rate, trial
// and strategy of the group (strategies innermost), then every pod of the
// race removed and the owner released before the next group. The two
// owners never run the node at once, so their trials cannot interleave.
// Nobody but the node's own actors evicts: the strategies only report
// what the kubelet, nodeguard guard and nodeguard in node mode did, and
// after an eviction of the hog the trial waits for its controller's
// replacement to run.
func RunKubeEviction(ctx context.Context, rt KubeRuntime, reg *EvictionStrategies, cfg EvictionConfig) (_ []EvictionTrial, retErr error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.Budget == 0 || cfg.Threshold == 0 || cfg.Threshold >= cfg.Budget || cfg.Trials <= 0 || len(cfg.Rates) == 0 || cfg.Step == 0 {
		return nil, fmt.Errorf("eviction benchmark: want budget > threshold > 0, trials > 0, a rate and a step (have %+v)", cfg)
	}
	if len(cfg.Strategies) == 0 {
		return nil, errors.New("eviction benchmark: no strategy")
	}
	order, groups, err := KubeOwnerGroups(reg, cfg.Strategies)
	if err != nil {
		return nil, fmt.Errorf("eviction benchmark: %w", err)
	}
	for _, o := range order {
		if rt.Owners[o] == nil {
			return nil, fmt.Errorf("eviction benchmark: strategies %s need %s to run the node, and there is no way to start it", strings.Join(groups[o], ", "), o)
		}
	}
	if cfg.Background == nil {
		cfg.Background = DefaultEvictionBackground(cfg.BusyboxImage, cfg.HogImage)
	}
	podRoot, err := rt.Cgroups.Kubepods()
	if err != nil {
		return nil, err
	}
	if err := rt.Pods.EnsureNamespace(ctx, evictionNamespace, namespaceTimeout); err != nil {
		return nil, err
	}
	r := &evictionRun{rt: EvictionRuntime{Pods: rt.Pods, Cgroups: rt.Cgroups}, cfg: cfg, reg: reg, podRoot: podRoot}
	total := len(cfg.Rates) * cfg.Trials * len(cfg.Strategies)
	var trials []EvictionTrial
	i := 0
	progressf(cfg.Progress, "eviction through the API server on node %s: budget %s, threshold %s, %d background pods, owners in turn: %s",
		rt.Pods.Node, FormatBytes(cfg.Budget), FormatBytes(cfg.Threshold), len(cfg.Background), strings.Join(order, ", "))
	for gi, o := range order {
		owner := rt.Owners[o]
		t0 := time.Now()
		if err := owner.Take(ctx); err != nil {
			return trials, fmt.Errorf("eviction benchmark: %s takes the node: %w", o, err)
		}
		progressf(cfg.Progress, "%s runs the node (%s)", o, time.Since(t0).Round(time.Millisecond))
		agent, _ := owner.(AgentEvents)
		err := func() (err error) {
			defer func() {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
				defer cancel()
				if rerr := rt.Pods.RemoveRace(cctx, evictionNamespace, kubePodTimeout); rerr != nil {
					err = errors.Join(err, fmt.Errorf("remove the race's pods from %s: %w", o, rerr))
				}
			}()
			r.rt.LogDir = owner.LogDir()
			r.background = map[string]*corev1.Pod{}
			if r.dirs, err = rt.Cgroups.Dirs(podRoot); err != nil {
				return err
			}
			if r.memDir, err = memoryDir(r.dirs); err != nil {
				return err
			}
			if err := checkLimit(r.memDir, cfg.Budget); err != nil {
				return fmt.Errorf("%s: %w (its node allocatable must be the budget)", o, err)
			}
			if err := r.startBackgroundKube(ctx); err != nil {
				return err
			}
			for _, rate := range cfg.Rates {
				for k := 1; k <= cfg.Trials; k++ {
					for _, s := range groups[o] {
						i++
						t, err := r.kubeTrial(ctx, rt.Pods, agent, rate, s, k, i)
						trials = append(trials, t)
						progressf(cfg.Progress, "trial %d/%d rate %s strategy %s: %s", i, total, FormatRate(rate), s, t.Outcome())
						if err != nil {
							return fmt.Errorf("trial %d (rate %s, strategy %s, #%d): %w", i, FormatRate(rate), s, k, err)
						}
					}
				}
			}
			return nil
		}()
		if err != nil {
			return trials, err
		}
		if gi < len(order)-1 {
			t1 := time.Now()
			if err := owner.Release(ctx); err != nil {
				return trials, fmt.Errorf("eviction benchmark: %s leaves the node: %w", o, err)
			}
			progressf(cfg.Progress, "%s left the node (%s)", o, time.Since(t1).Round(time.Millisecond))
		}
	}
	return trials, nil
}

// startBackgroundKube starts the background pods through the API server
// and waits until they run.
func (r *evictionRun) startBackgroundKube(ctx context.Context) error {
	if len(r.cfg.Background) == 0 {
		return nil
	}
	if _, err := r.rt.Pods.Apply(ctx, r.cfg.Background, ""); err != nil {
		return fmt.Errorf("start background pods: %w", err)
	}
	for _, p := range r.cfg.Background {
		r.background[evictionNamespace+"/"+p.Name] = p
	}
	for _, p := range r.cfg.Background {
		wctx, cancel := context.WithTimeout(ctx, kubePodTimeout)
		err := r.rt.Pods.Wait(wctx, evictionNamespace, p.Name, running)
		cancel()
		if err != nil {
			return fmt.Errorf("background pod %s never ran: %w", p.Name, err)
		}
	}
	return nil
}

// kubeTrial is one trial of the race through the API server: as trial,
// with the hog a Deployment, the strategy ready before the hog starts,
// the hog's end watched for, and after an eviction of the hog the wait
// for its controller's replacement.
func (r *evictionRun) kubeTrial(ctx context.Context, kp *KubePods, agent AgentEvents, rate uint64, strategy string, k, index int) (EvictionTrial, error) {
	name := hogName(rate, strategy, k)
	st := &trialState{r: r}
	st.t = EvictionTrial{Rate: rate, Strategy: strategy, Trial: k, Budget: r.cfg.Budget, Threshold: r.cfg.Threshold, Controlled: true}
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
	if eo, ok := strat.(endObserver); ok {
		st.observeEnd = eo.observesEnd()
	}
	sctx, stopStrategy := context.WithCancel(ctx)
	defer stopStrategy()
	env := &TrialEnv{
		PodRoot: r.podRoot, Dirs: r.dirs, Budget: r.cfg.Budget, Threshold: r.cfg.Threshold,
		Evict: func(context.Context, string) (string, error) {
			return "", errors.New("the race through the API server evicts nothing itself")
		},
		Pods:     func() ([]EvictionCandidate, error) { return r.candidates(sctx) },
		Detected: st.detected, AgentEvicted: st.agentEvicted, Agent: agent,
		Log:  r.cfg.Log.With("strategy", strategy, "trial", index),
		Rand: rand.New(rand.NewPCG(r.cfg.Seed, uint64(index))),
	}
	st.oom = &oomCounter{}
	var stratRes error
	stratDone := make(chan struct{})
	go func() { stratRes = strat.Run(sctx, env); close(stratDone) }()
	stopAndWait := func() {
		stopStrategy()
		select {
		case <-stratDone:
		case <-time.After(kubeStrategyStopTimeout):
		}
	}
	if rd, ok := strat.(readier); ok {
		select {
		case <-rd.Ready():
		case <-stratDone:
			return fail(fmt.Errorf("strategy %s ended before it was ready: %v", strategy, stratRes))
		case <-time.After(strategyReadyTimeout):
			stopAndWait()
			return fail(fmt.Errorf("strategy %s not ready after %v", strategy, strategyReadyTimeout))
		case <-ctx.Done():
			stopAndWait()
			return fail(ctx.Err())
		}
	}

	hog, err := kp.StartHog(ctx, hogPodDelay(name, r.cfg.HogImage, rate, r.cfg.Step, r.cfg.Budget, kubeHogDelay), kubePodTimeout)
	if err != nil {
		stopAndWait()
		return fail(fmt.Errorf("start hog: %w", err))
	}
	stopHog := func() error {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), kubePodTimeout+10*time.Second)
		defer cancel()
		return kp.StopHog(cctx, evictionNamespace, name, kubePodTimeout)
	}
	st.mu.Lock()
	st.hogKey = hog.Namespace + "/" + hog.Name
	st.t.Hog = st.hogKey
	st.mu.Unlock()
	tail := &logTail{path: hogLogPath(r.rt.LogDir, hog.Namespace, hog.Name, hog.UID, hogContainer)}
	defer tail.close()
	if err := r.waitReadyKube(ctx, tail, kp, hog); err != nil {
		stopAndWait()
		return fail(errors.Join(err, stopHog()))
	}
	baseline, err := r.workingSet()
	baselineAt := time.Now()
	if err == nil {
		err = st.oom.init(r.memDir)
	}
	var hogMem string
	if err == nil {
		hogMem, err = r.hogLeaf(hog)
	}
	if err != nil {
		stopAndWait()
		return fail(errors.Join(err, stopHog()))
	}
	st.mu.Lock()
	st.t.Baseline, st.t.BaselineAt = baseline, baselineAt
	st.mu.Unlock()

	monErr := r.monitor(ctx, st, stratDone, hogMem, TrialTimeout(r.cfg.Budget, rate))
	st.mu.Lock()
	st.closed = true
	evicted := slices.Contains(st.t.Victims, st.hogKey)
	st.mu.Unlock()

	// The controller's replacement, when the hog was evicted, with the
	// strategy still running (nodeguard guard removes the pod it killed
	// through the API server after the kill: stopped at once, it never
	// would); what its actors do from here on is not the trial's. Then
	// the hog's Deployment and pods go, the strategy stops, and evicted
	// background pods come back.
	if evicted {
		rctx, cancel := context.WithTimeout(ctx, replacementTimeout+10*time.Second)
		at, err := kp.WaitReplacement(rctx, evictionNamespace, name, string(hog.UID), replacementTimeout)
		cancel()
		st.mu.Lock()
		if err != nil {
			st.t.Note = strings.TrimPrefix(st.t.Note+"; "+err.Error(), "; ")
		} else {
			st.t.Replaced = at
		}
		st.mu.Unlock()
	}
	cerr := stopHog()
	stopStrategy()
	select {
	case <-stratDone:
		switch err := stratRes; {
		case errors.Is(monErr, errStrategyReturned):
			monErr = fmt.Errorf("strategy %s returned before its trial ended: %v", strategy, err)
		case err != nil && !errors.Is(err, context.Canceled) && monErr == nil:
			monErr = fmt.Errorf("strategy %s: %w", strategy, err)
		}
	case <-time.After(kubeStrategyStopTimeout):
		if monErr == nil {
			monErr = fmt.Errorf("strategy %s did not return %v after its context ended", strategy, kubeStrategyStopTimeout)
		}
	}
	if cerr == nil {
		cerr = r.restoreKube(ctx, st.victims)
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

// hogLeaf is the hog container's own cgroup (memory hierarchy) beneath the
// hog pod's.
func (r *evictionRun) hogLeaf(hog *corev1.Pod) (string, error) {
	parent, err := r.rt.Cgroups.Parent(hog)
	if err != nil {
		return "", err
	}
	dirs, err := r.rt.Cgroups.Dirs(parent)
	if err != nil {
		return "", err
	}
	mem, err := memoryDir(dirs)
	if err != nil {
		return "", err
	}
	return findLeaf(mem.Path, "hog")
}

// waitReadyKube tails the hog's log until its first line, within
// kubePodTimeout (the owner starts the sandbox after the API server binds
// the pod).
func (r *evictionRun) waitReadyKube(ctx context.Context, tail *logTail, kp *KubePods, hog *corev1.Pod) error {
	deadline := time.Now().Add(kubePodTimeout)
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
			if p, err := kp.Client.CoreV1().Pods(hog.Namespace).Get(ctx, hog.Name, metav1.GetOptions{}); err == nil {
				state = fmt.Sprintf("phase %s, %s %s", p.Status.Phase, p.Status.Reason, p.Status.Message)
				for _, cs := range p.Status.ContainerStatuses {
					state += fmt.Sprintf("; container %s: %+v", cs.Name, cs.State)
				}
			}
			return fmt.Errorf("hog %s printed nothing in %v (%s; log %s)", hog.Name, kubePodTimeout, state, tail.path)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(tailPoll):
		}
	}
}

// restoreKube brings back the background pods that were evicted: each is
// deleted (the evicted pod stays Failed in the API), waited for, created
// again and waited for until it runs.
func (r *evictionRun) restoreKube(ctx context.Context, victims []string) error {
	for _, key := range victims {
		spec, ok := r.background[key]
		if !ok {
			continue
		}
		if err := r.rt.Pods.Delete(ctx, evictionNamespace, spec.Name); err != nil && !isNotFound(err) {
			return fmt.Errorf("restore %s: delete: %w", key, err)
		}
		wctx, cancel := context.WithTimeout(ctx, kubePodTimeout)
		err := r.rt.Pods.Wait(wctx, evictionNamespace, spec.Name, gone)
		cancel()
		if err != nil {
			return fmt.Errorf("restore %s: never went: %w", key, err)
		}
		if _, err := r.rt.Pods.Apply(ctx, []*corev1.Pod{spec}, ""); err != nil {
			return fmt.Errorf("restore %s: %w", key, err)
		}
		wctx, cancel = context.WithTimeout(ctx, kubePodTimeout)
		err = r.rt.Pods.Wait(wctx, evictionNamespace, spec.Name, running)
		cancel()
		if err != nil {
			return fmt.Errorf("restore %s: never ran again: %w", key, err)
		}
	}
	return nil
}
