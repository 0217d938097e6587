// One trial of the OOM race: a hog started against one strategy, watched
// from its first log line until the release of its memory, the kernel OOM
// killer or the timeout.

package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/lifecycle"
)

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
	// observeEnd: the strategy's evictions are another process's (the
	// kubelet's), whose kill time it does not report: the monitor times
	// the hog container's end (hogEnd, its first sample with no process
	// left in the hog's cgroup), which becomes the kill once an eviction
	// of the hog is reported (externalKill).
	observeEnd   bool
	externalKill bool
	hogEnd       time.Time
}

func (s *trialState) detected(at time.Time) {
	if at.IsZero() {
		at = time.Now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// The earliest, not the first reported: a strategy of two actors
	// (the kubelet and nodeguard guard) reports each from its own log.
	if !s.closed && (s.t.Detected.IsZero() || at.Before(s.t.Detected)) {
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
// until the benchmark deletes it. An eviction without a kill time (the
// kubelet's, read from its log) is timed by the hog container's end,
// which the monitor watches for (observeEnd).
func (s *trialState) agentEvicted(ev AgentEviction) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	switch {
	case ev.KillSent.IsZero():
		if ev.Victim == s.hogKey && s.t.KillSent.IsZero() {
			s.externalKill, s.agentKill = true, true
			if !s.hogEnd.IsZero() {
				s.t.KillSent, s.t.KillReturned = s.hogEnd, s.hogEnd
			}
		}
	case s.t.KillSent.IsZero() || ev.KillSent.Before(s.t.KillSent):
		// The earliest kill: of two actors, the one that got there
		// first.
		s.t.KillSent, s.t.KillReturned = ev.KillSent, ev.KillSent
		s.agentKill, s.externalKill = true, false
	}
	if s.t.Reason == "" {
		s.t.Reason = ev.Reason()
	}
	if slices.Contains(s.t.Victims, ev.Victim) {
		return // both actors of a strategy evicted it
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
		if st.observeEnd && st.hogEnd.IsZero() && (smp.hogGone || procsEmpty(hogMem)) {
			st.hogEnd = smp.At
			if st.externalKill && st.t.KillSent.IsZero() {
				st.t.KillSent, st.t.KillReturned = smp.At, smp.At
			}
		}
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
