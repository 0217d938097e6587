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
	// trigger asks for a probe besides the schedule (Manager.Trigger);
	// probedID is the container last probed (a probe was made).
	trigger  chan struct{}
	probedID string
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

// run probes at the instants of w's schedule until ctx is done, and when
// triggered (Manager.Trigger) for a container it has not probed yet.
func (w *worker) run(ctx context.Context) {
	p := period(w.spec)
	var jitter time.Duration
	// As the kubelet's workers: a worker made within a period of the
	// Manager's start (an agent that restarted and adopts every pod at
	// once) waits a random part of its period first, so that the probes
	// of those pods are spread over the period's instants instead of all
	// falling on one.
	if w.m.now().Sub(w.m.start) < p {
		jitter = rand.N(p)
	}
	sched := w.m.schedule
	if w.spec.Exec != nil {
		// An exec probe's work is the runtime's (a runc exec each), which
		// a group of them at one instant would queue behind each other,
		// past their timeoutSeconds: each keeps an instant of its own.
		sched.grid = 0
	}
	at := sched.first(time.Now(), jitter)
	t := time.NewTimer(time.Until(at))
	defer t.Stop()
	for {
		var fire time.Time
		select {
		case <-ctx.Done():
			return
		case <-w.trigger:
			if !w.unprobed() {
				continue
			}
			w.doProbe(ctx)
			// As the kubelet's worker after a manual run: the next
			// probe is a whole period on, not at an instant that may
			// come at once.
			at = sched.align(time.Now().Add(p))
			fire = at
		case <-t.C:
			w.doProbe(ctx)
			at, fire = sched.next(at, time.Now(), p)
		}
		t.Reset(time.Until(fire))
	}
}

// unprobed tells whether the container the Manager knows has not been
// probed by w yet: what a trigger is for.
func (w *worker) unprobed() bool {
	info, ok := w.m.container(w.key.uid, w.key.container)
	return ok && info.ID != "" && info.ID != w.probedID
}

// DefaultGrid is the step of the grid that the probes of the network
// kinds (tcpSocket, httpGet, grpc) fall on unless Config.Spread.
const DefaultGrid = time.Second

// schedule places probe instants on a grid: epoch + k·grid. Periods are
// whole seconds, so on the 1 s grid a worker keeps its place, and the
// network probes of a node's pods are made together, a few groups per
// second, instead of each at an instant of its own. The process then
// wakes once per group: measured with real tcpSocket probes
// (BenchmarkPacedProbes), a probe costs about a sixth of the CPU it costs
// alone, most of which is the waking of idle threads for it. A zero grid
// places each worker's probes where its start fell, as the kubelet's
// tickers do.
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

// next is what follows a probe made for the instant last and finished at
// now: the worker's next instant, one period p on, and when to fire for
// it. A probe that took longer than its period (a timeoutSeconds beyond
// periodSeconds) missed instants: as a ticker keeps one tick for a slow
// receiver and drops the rest, the next probe fires at once (on the next
// grid instant) and the worker keeps its place, its next instant being
// the last one missed.
func (s schedule) next(last, now time.Time, p time.Duration) (at, fire time.Time) {
	at = last.Add(p)
	if at.After(now) {
		return at, s.align(at)
	}
	at = at.Add(now.Sub(at) / p * p)
	return at, s.align(now)
}

// doProbe makes one probe if the kubelet's rules allow one now, and
// records its result once a threshold is reached.
func (w *worker) doProbe(ctx context.Context) {
	info, ok := w.m.container(w.key.uid, w.key.container)
	if !ok || info.ID == "" {
		return // not created yet
	}
	if info.ID != w.containerID {
		// A new container: start over, with the initial result, unless
		// it has one carried over from its published status
		// (Container.WasReady).
		w.containerID, w.lastResult, w.resultRun, w.onHold = info.ID, Unknown, 0, false
		w.m.setInitial(w.key, info.ID, initial(w.key.kind))
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
	w.probedID = info.ID
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
