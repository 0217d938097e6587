// Liveness, readiness and startup probes (lifecycle/prober): the results
// feed the containers' ready and started and the pod's Ready condition; a
// failed liveness or startup probe kills the container, and the restart
// back-off (containers.go) brings it back.

package lifecycle

import (
	"context"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/lifecycle/prober"
)

// probeDialer returns how TCP, HTTP and gRPC probes reach pod IPs: from
// the namespace the pod network's bridge is in (Network.NodeNetNS, or
// nodeguard's own when that is ""), never from anywhere else. Without a
// Network (the pod network is not nodeguard's to verify) they dial from
// probeNetNS (Config.ProbeNetNS); when that is "" too nodeguard does not
// know where pod IPs are routed, and those probes are not made (each run
// errors, is thrown away, and says so in an Unhealthy event).
func probeDialer(n *Network, probeNetNS string) (prober.DialFunc, func() error, error) {
	switch {
	case n == nil && probeNetNS == "":
		return nil, func() error { return nil }, nil
	case n == nil:
		return prober.NetNSDialer(probeNetNS)
	case n.NodeNetNS == "":
		var d net.Dialer
		return d.DialContext, func() error { return nil }, nil
	}
	return prober.NetNSDialer(n.NodeNetNS)
}

// onProbe is the prober's OnUpdate: a changed result wakes the pod's
// worker, which reports readiness or kills an unhealthy container. A
// liveness success wakes nothing, as in the kubelet's syncLoopIteration
// (only a liveness failure is acted on, and no status shows liveness):
// the first success of every liveness probe would otherwise sync its
// pod, 110 syncs for 110 newly probed pods.
func (m *Manager) onProbe(u prober.Update) {
	if u.Kind == prober.Liveness && u.Result == prober.Success {
		return
	}
	m.mu.Lock()
	st := m.pods[u.PodUID]
	m.mu.Unlock()
	if st == nil {
		return
	}
	if u.Result == prober.Failure && u.Kind != prober.Readiness {
		m.log.Info("probe failed", "pod", key(st.pod), "container", u.Container, "probe", u.Kind.String(), "output", u.Message)
	} else {
		m.log.Debug("probe result", "pod", key(st.pod), "container", u.Container, "probe", u.Kind.String(), "result", u.Result.String())
	}
	st.poke()
}

// observeContainers starts the pod's probe workers (once) and tells them
// what the runtime just said of its containers.
func (m *Manager) observeContainers(ctx context.Context, st *podState, byName map[string]*runtimeapi.Container, states map[string]cri.State) {
	m.probes.AddPod(ctx, st.pod)
	for _, c := range prober.Containers(st.pod) {
		ctr, ok := byName[c.Name]
		if !ok {
			continue
		}
		s := states[c.Name]
		running := s.Phase == cri.PhaseRunning
		wasReady, wasStarted := published(st.pod, c.Name, ctr.Id)
		m.probes.SetContainer(st.pod.UID, c.Name, prober.Container{
			ID: ctr.Id, Running: running, StartedAt: s.StartedAt, PodIP: st.ip,
			WasReady: running && wasReady, WasStarted: running && wasStarted,
		})
	}
}

// published reports what the pod's published status (the API server's
// copy in node mode) last said of container id: ready, and started. Only
// the same container counts; a replaced one starts over. Ready counts only
// while the pod's Ready condition is True too: when a node stops
// reporting, the node controller sets that condition False and leaves the
// containers' ready as they were, and a pod the cluster already took out
// of its endpoints is not put back before a probe says so.
func published(pod *corev1.Pod, name, id string) (ready, started bool) {
	podReady := false
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			podReady = c.Status == corev1.ConditionTrue
		}
	}
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range list {
			if cs.Name == name && cs.ContainerID == "containerd://"+id {
				return cs.Ready && podReady, cs.Started != nil && *cs.Started
			}
		}
	}
	return false, false
}

// killUnhealthy stops every running container whose liveness or startup
// probe failed, with the probe's terminationGracePeriodSeconds or the
// pod's, as the kubelet does; the stops wait out their grace on stop
// slots (slots.go). It reports whether it stopped any: their restart is
// the next sync's.
func (m *Manager) killUnhealthy(ctx context.Context, st *podState, byName map[string]*runtimeapi.Container, states map[string]cri.State) bool {
	var stops []func()
	for _, c := range prober.Containers(st.pod) {
		ctr, ok := byName[c.Name]
		if !ok || states[c.Name].Phase != cri.PhaseRunning {
			continue
		}
		for _, k := range []prober.Kind{prober.Startup, prober.Liveness} {
			if r, ok := m.probes.Result(st.pod.UID, c.Name, ctr.Id, k); !ok || r != prober.Failure {
				continue
			}
			g := probeGrace(st.pod, probeOf(c, k))
			m.log.Info("container failed its probe; killing it", "pod", key(st.pod), "container", c.Name,
				"probe", k.String(), "grace", g)
			m.event(st.pod, c.Name, corev1.EventTypeNormal, ReasonKilling, killingMessage(st.pod, c.Name, k))
			id := ctr.Id
			stops = append(stops, func() {
				// Its preStop hook first, as the kubelet's killContainer.
				if err := m.stopContainer(ctx, st.pod, st.ip, c, id, g); err != nil {
					m.log.Warn("stop unhealthy container", "pod", key(st.pod), "container", c.Name, "err", err)
				}
			})
			break
		}
	}
	m.slots.waitOut(stops)
	return len(stops) > 0
}

func probeOf(c *corev1.Container, k prober.Kind) *corev1.Probe {
	if k == prober.Startup {
		return c.StartupProbe
	}
	return c.LivenessProbe
}

// probeGrace is a probe's own terminationGracePeriodSeconds when set, else
// the pod's (the kubelet's ProbeTerminationGracePeriod).
func probeGrace(pod *corev1.Pod, p *corev1.Probe) time.Duration {
	if p != nil && p.TerminationGracePeriodSeconds != nil {
		return time.Duration(*p.TerminationGracePeriodSeconds) * time.Second
	}
	return grace(pod)
}

// probeStatus is a running container's started and ready, by its probes.
// A started container that is not ready has its readiness probed at once
// if it has not been yet, as the kubelet's prober manager does when it
// makes a status: a new container's first probe comes when it runs, not a
// period after its worker found it not yet created. The prober learns of
// the container from this view first: the sync's own (observeContainers)
// was taken before it started the container.
func (m *Manager) probeStatus(st *podState, c *corev1.Container, id string, startedAt time.Time) (started, ready bool) {
	pod := st.pod
	started, ready = m.probes.Started(pod.UID, c.Name, id), m.probes.Ready(pod.UID, c.Name, id, c.ReadinessProbe != nil)
	if started && !ready && c.ReadinessProbe != nil {
		m.probes.SetContainer(pod.UID, c.Name, prober.Container{ID: id, Running: true, StartedAt: startedAt, PodIP: st.ip})
		m.probes.Trigger(pod.UID, c.Name, prober.Readiness)
	}
	return started, ready
}

// ProbeCounts returns prober_probe_total's series (metrics).
func (m *Manager) ProbeCounts() []prober.Count { return m.probes.Counts() }
