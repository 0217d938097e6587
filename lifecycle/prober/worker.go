package prober

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// worker probes one container of one pod with one probe type, across the
// container's restarts (each new container ID starts it over).
type worker struct {
	m    *Manager
	key  resultKey
	pod  *corev1.Pod
	ctr  *corev1.Container
	spec *corev1.Probe

	// containerID is the container last probed; lastResult and resultRun
	// count the runs in a row with one result toward the thresholds.
	containerID string
	lastResult  Result
	resultRun   int
	// onHold: a liveness or startup failure was reported for containerID;
	// nothing more is probed until the container is replaced.
	onHold bool
	// trigger asks for a probe besides the schedule (Manager.Trigger).
	trigger chan struct{}
}

func newWorker(m *Manager, pod *corev1.Pod, c *corev1.Container, kind Kind) *worker {
	return &worker{m: m, key: resultKey{uid: pod.UID, container: c.Name, kind: kind}, pod: pod, ctr: c, spec: kind.spec(c), trigger: make(chan struct{}, 1)}
}

// period is the probe's periodSeconds (10 s when unset, as defaulted).
func period(p *corev1.Probe) time.Duration {
	if p.PeriodSeconds <= 0 {
		return 10 * time.Second
	}
	return time.Duration(p.PeriodSeconds) * time.Second
}

func threshold(v, def int32) int {
	if v <= 0 {
		return int(def)
	}
	return int(v)
}

// run probes at the instants of w's schedule until ctx is done.
func (w *worker) run(ctx context.Context) {
	p := period(w.spec)
	var jitter time.Duration
	// A worker made long after the Manager started (most likely a pod
	// adopted by a restarted agent among many) waits a random part of
	// its period, so that the probes of many pods do not all fall on
	// one instant of the grid.
	if w.m.now().Sub(w.m.start) > p {
		jitter = rand.N(p)
	}
	sched := w.m.schedule
	at := sched.first(time.Now(), jitter)
	t := time.NewTimer(time.Until(at))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.trigger:
			// Besides the schedule, which keeps its instants.
			w.doProbe(ctx)
			continue
		case <-t.C:
		}
		w.doProbe(ctx)
		at = sched.next(at, time.Now(), p)
		t.Reset(time.Until(at))
	}
}

// DefaultGrid is the step of the grid the probes of every worker fall on
// unless Config.Grid says otherwise.
const DefaultGrid = time.Second

// schedule places probe instants on a grid: epoch + k·grid. Periods are
// whole seconds, so on the default 1 s grid a worker keeps its place, and
// the probes of a node's pods are made together, a few groups per second,
// instead of each at an instant of its own. The process then wakes once
// per group: measured with real tcpSocket probes (BenchmarkPacedProbes),
// a probe costs about a third of the CPU it costs alone, most of which
// is the waking of idle threads for it. A grid of zero or less places
// each worker's probes where its start fell, as the kubelet's tickers do.
type schedule struct {
	epoch time.Time // with a monotonic reading
	grid  time.Duration
}

// align returns the first grid instant at or after t.
func (s schedule) align(t time.Time) time.Time {
	if s.grid <= 0 {
		return t
	}
	d := t.Sub(s.epoch)
	if d <= 0 {
		return s.epoch
	}
	k := (d + s.grid - 1) / s.grid
	return s.epoch.Add(k * s.grid)
}

// first is the first probe instant of a worker made at now that waits
// jitter before its first probe.
func (s schedule) first(now time.Time, jitter time.Duration) time.Time {
	return s.align(now.Add(jitter))
}

// next is the probe instant that follows last, one period p on; instants
// already past at now are skipped as a ticker drops the ticks a slow
// receiver missed (a probe that took longer than its period), keeping
// the worker's place.
func (s schedule) next(last, now time.Time, p time.Duration) time.Time {
	n := last.Add(p)
	if !n.After(now) {
		n = n.Add((now.Sub(n)/p + 1) * p)
	}
	return s.align(n)
}

// doProbe makes one probe if the kubelet's rules allow one now, and
// records its result once a threshold is reached.
func (w *worker) doProbe(ctx context.Context) {
	info, ok := w.m.container(w.key.uid, w.key.container)
	if !ok || info.ID == "" {
		return // not created yet
	}
	if info.ID != w.containerID {
		// A new container: start over, with the initial result.
		w.containerID, w.lastResult, w.resultRun, w.onHold = info.ID, Unknown, 0, false
		w.m.set(w.key, info.ID, initial(w.key.kind), "")
	}
	if !info.Running {
		if w.key.kind == Readiness {
			w.m.set(w.key, info.ID, Failure, "container not running")
		}
		return
	}
	if w.onHold {
		return
	}
	switch w.key.kind {
	case Startup:
		if w.m.Started(w.key.uid, w.key.container, info.ID) {
			return // started: the startup probe is done with this container
		}
	default:
		if !w.m.Started(w.key.uid, w.key.container, info.ID) {
			return // startup gates liveness and readiness
		}
	}
	if w.m.now().Sub(info.StartedAt) < time.Duration(w.spec.InitialDelaySeconds)*time.Second {
		return
	}
	res, msg, err := w.m.cfg.Prober.Probe(ctx, w.spec, Target{ContainerID: info.ID, PodIP: info.PodIP, Container: w.ctr})
	if err != nil {
		if ctx.Err() != nil {
			return // stopping: no result, no count
		}
		// The probe could not be made: its result is thrown away, and
		// said, as the kubelet's "errored" event does.
		w.m.count(w.pod, w.key, Unknown)
		w.m.log.Debug("probe errored", "pod", w.pod.Namespace+"/"+w.pod.Name, "container", w.key.container,
			"probe", w.key.kind.String(), "err", err)
		w.event(info.ID, ReasonUnhealthy, fmt.Sprintf("%s probe errored and resulted in unknown state: %s", w.key.kind, err))
		return
	}
	switch res {
	case Failure:
		w.event(info.ID, ReasonUnhealthy, fmt.Sprintf("%s probe failed: %s", w.key.kind, msg))
	case Warning:
		// A success, said with a warning, as the kubelet's.
		w.event(info.ID, ReasonProbeWarning, fmt.Sprintf("%s probe warning: %s", w.key.kind, msg))
		res = Success
	}
	w.m.count(w.pod, w.key, res)
	if res == w.lastResult {
		w.resultRun++
	} else {
		w.lastResult, w.resultRun = res, 1
	}
	if (res == Failure && w.resultRun < threshold(w.spec.FailureThreshold, 3)) ||
		(res == Success && w.resultRun < threshold(w.spec.SuccessThreshold, 1)) {
		return
	}
	w.m.set(w.key, info.ID, res, msg)
	if res == Failure && w.key.kind != Readiness {
		// The container is killed and replaced; until then there is
		// nothing more to learn from it.
		w.onHold, w.resultRun = true, 0
	}
}

// event tells Config.OnEvent of a run's event.
func (w *worker) event(id, reason, msg string) {
	if w.m.cfg.OnEvent != nil {
		w.m.cfg.OnEvent(Event{Pod: w.pod, Container: w.key.container, ContainerID: id, Kind: w.key.kind, Reason: reason, Message: msg})
	}
}

// initial is the result a container has before its first counted probe,
// as the kubelet's: not ready, alive, not started.
func initial(k Kind) Result {
	switch k {
	case Readiness:
		return Failure
	case Liveness:
		return Success
	}
	return Unknown
}
