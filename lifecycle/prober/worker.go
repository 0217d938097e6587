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
}

func newWorker(m *Manager, pod *corev1.Pod, c *corev1.Container, kind Kind) *worker {
	return &worker{m: m, key: resultKey{uid: pod.UID, container: c.Name, kind: kind}, pod: pod, ctr: c, spec: kind.spec(c)}
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

// run probes every period until ctx is done.
func (w *worker) run(ctx context.Context) {
	p := period(w.spec)
	// A worker made long after the Manager started (most likely a pod
	// adopted by a restarted agent among many) waits a random part of
	// its period, so that the probes of many pods do not all fall on
	// one tick.
	if w.m.now().Sub(w.m.start) > p {
		t := time.NewTimer(rand.N(p))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
	tick := time.NewTicker(p)
	defer tick.Stop()
	for {
		w.doProbe(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
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
