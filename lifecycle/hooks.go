// Container lifecycle hooks, as the kubelet's (pkg/kubelet/lifecycle's
// handler runner; postStart in kuberuntime's startContainer, preStop in
// its killContainer).

package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/lifecycle/prober"
)

// Event reasons and the waiting reason of failed hooks, the kubelet's
// (pkg/kubelet/events, kubecontainer.ErrPostStartHook).
const (
	EventFailedPostStartHook = "FailedPostStartHook"
	EventFailedPreStopHook   = "FailedPreStopHook"
	// ReasonPostStartHookError: the container was killed because its
	// postStart hook failed; the restart back-off brings it back.
	ReasonPostStartHookError = "PostStartHookError"
)

const (
	// minStopGrace is what a container is given between TERM and KILL
	// after a preStop hook that used up its grace period, the kubelet's
	// minimumGracePeriodInSeconds: a process that handles TERM gets a
	// moment to do so.
	minStopGrace = 2 * time.Second
	// postStartTimeout bounds a postStart hook. The kubelet waits for one
	// for ever, holding its pod's worker (and so its deletion) all that
	// while; nodeguard fails a hook still running after the longest
	// restart back-off, as one that exited non-zero: a hook that slow
	// is stuck, and the pod must stay deletable.
	postStartTimeout = DefaultBackoffMax
)

// hookFailure is the attempt of a container killed for its postStart
// hook: the status says why it terminated.
type hookFailure struct {
	id, message string
}

// postStart runs c's postStart hook in the container id just started, as
// the kubelet does before the container counts as started: the sync that
// started it is still running, so the prober does not see it running
// until the hook returned. A failed hook is an event, the container is
// killed as the kubelet kills it (its preStop hook, the pod's grace
// period) and, if its restart policy starts it again, the error, a
// PostStartHookError with the hook's message, is the container's waiting
// reason; the restart back-off brings it back. One that is not restarted
// stays terminated, its state saying why (status.go). The caller holds a
// work slot.
func (m *Manager) postStart(ctx context.Context, st *podState, c *corev1.Container, id string) error {
	hctx, cancel := context.WithTimeout(ctx, postStartTimeout)
	err := m.runHook(hctx, st.pod, st.ip, c, id, c.Lifecycle.PostStart)
	cancel()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err() // nodeguard stopping: no fault of the hook
	}
	m.event(st.pod, c.Name, corev1.EventTypeWarning, EventFailedPostStartHook, err.Error())
	if st.hookFailed == nil {
		st.hookFailed = map[string]hookFailure{}
	}
	st.hookFailed[c.Name] = hookFailure{id: id, message: err.Error()}
	g := grace(st.pod)
	m.log.Info("container failed its postStart hook; killing it", "pod", key(st.pod), "container", c.Name, "grace", g)
	m.slots.waitOut([]func(){func() {
		if err := m.stopContainer(ctx, st.pod, st.ip, c, id, g); err != nil {
			m.log.Warn("stop a container whose postStart hook failed", "pod", key(st.pod), "container", c.Name, "err", err)
		}
	}})
	if !m.restartsAfterKill(ctx, st.pod, c, id) {
		// As the kubelet shows a container it will not start again:
		// terminated (status.go says why), not waiting.
		return nil
	}
	return &imageError{container: c.Name, reason: ReasonPostStartHookError, err: err}
}

// restartsAfterKill tells whether the restart policy starts container c
// again after it was killed as id: the kubelet's
// ShouldContainerBeRestarted (a sidecar always; else Always, OnFailure
// unless it exited 0, never Never).
func (m *Manager) restartsAfterKill(ctx context.Context, pod *corev1.Pod, c *corev1.Container, id string) bool {
	if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
		return true
	}
	switch pod.Spec.RestartPolicy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		cctx, cancel := call(ctx)
		raw, err := m.cfg.Runtime.ContainerStatus(cctx, id)
		cancel()
		s := cri.ContainerState(raw)
		// Unknown counts as a failure: the next sync looks again.
		return err != nil || s.Phase != cri.PhaseExited || s.ExitCode != 0
	}
	return true
}

// stopContainer stops the running container id as the kubelet's
// killContainer: c's preStop hook first (c nil or without one: none),
// inside the grace period g, then the runtime's StopContainer (TERM, KILL
// after what is left of g, at least minStopGrace). A hook still running
// at the end of g is left behind: the stop kills it with the container.
// A failed hook is an event, and the stop goes on. The caller runs it on
// a stop slot (slots.go): it can take g and more.
func (m *Manager) stopContainer(ctx context.Context, pod *corev1.Pod, podIP string, c *corev1.Container, id string, g time.Duration) error {
	left := g
	if g > 0 && c != nil && c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		// The grace is real time (the runtime's), not Config.Now's.
		start := time.Now()
		hctx, cancel := context.WithTimeout(ctx, g)
		err := m.runHook(hctx, pod, podIP, c, id, c.Lifecycle.PreStop)
		cancel()
		elapsed := time.Since(start)
		switch {
		case err != nil && ctx.Err() == nil:
			m.event(pod, c.Name, corev1.EventTypeWarning, EventFailedPreStopHook, err.Error())
		case err == nil:
			m.log.Debug("preStop hook done", "pod", key(pod), "container", c.Name, "took", elapsed)
		}
		left = max(g-elapsed, minStopGrace)
	}
	sctx, cancel := context.WithTimeout(ctx, left+callTimeout)
	defer cancel()
	return m.cfg.Runtime.StopContainer(sctx, id, left)
}

// runHook runs handler h of container c (running as id) until ctx ends,
// and returns the kubelet's message for a hook that failed. Exec hooks run
// through the CRI's ExecSync, httpGet hooks are sent as the httpGet probe
// is (prober.Handlers.HTTPGet: from the node's network namespace, to the
// pod IP unless host is set) and pass on any response, as the kubelet's;
// only no response at all fails them.
func (m *Manager) runHook(ctx context.Context, pod *corev1.Pod, podIP string, c *corev1.Container, id string, h *corev1.LifecycleHandler) error {
	to := hookTimeout(ctx)
	switch {
	case h.Exec != nil:
		res, err := m.cfg.Runtime.ExecSync(ctx, id, h.Exec.Command, to)
		out := string(res.Stdout) + string(res.Stderr)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("command '%s' exited with %d: %s", strings.Join(h.Exec.Command, " "), res.ExitCode, res.Stderr)
		}
		if err != nil {
			return fmt.Errorf("Exec lifecycle hook (%v) for Container %q in Pod %q failed - error: %w, message: %q",
				h.Exec.Command, c.Name, key(pod), err, out)
		}
		return nil
	case h.HTTPGet != nil:
		if err := m.hookGet(ctx, podIP, c, h.HTTPGet, to); err != nil {
			return fmt.Errorf("HTTP lifecycle hook (%s) for Container %q in Pod %q failed - error: %w", h.HTTPGet.Path, c.Name, key(pod), err)
		}
		return nil
	case h.Sleep != nil:
		t := time.NewTimer(time.Duration(h.Sleep.Seconds) * time.Second)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("Sleep lifecycle hook (%d) for Container %q in Pod %q failed - error: %w",
				h.Sleep.Seconds, c.Name, key(pod), errors.New("container terminated before sleep hook finished"))
		}
	case h.TCPSocket != nil:
		// Deprecated and accepted by the API server for compatibility
		// only: the kubelet fails the hook when it runs.
		return fmt.Errorf("Cannot run handler: tcpSocket is not a lifecycle hook handler the kubelet runs (deprecated; use exec, httpGet or sleep) for Container %q in Pod %q", c.Name, key(pod))
	}
	return fmt.Errorf("Cannot run handler: no handler for Container %q in Pod %q", c.Name, key(pod))
}

// hookGet sends an httpGet hook. An https request answered in plain HTTP
// is sent again over HTTP without its Authorization header, as the
// kubelet does since its ConsistentHTTPGetHandlers.
func (m *Manager) hookGet(ctx context.Context, podIP string, c *corev1.Container, a *corev1.HTTPGetAction, to time.Duration) error {
	if a.Host == "" && podIP == "" {
		return errors.New("the pod has no IP to send the hook to")
	}
	t := prober.Target{PodIP: podIP, Container: c}
	_, _, err := m.hookHTTP.HTTPGet(ctx, a, t, to)
	if err != nil && a.Scheme == corev1.URISchemeHTTPS && errors.Is(err, http.ErrSchemeMismatch) {
		plain := *a
		plain.Scheme = corev1.URISchemeHTTP
		plain.HTTPHeaders = nil
		for _, hd := range a.HTTPHeaders {
			if !strings.EqualFold(hd.Name, "Authorization") {
				plain.HTTPHeaders = append(plain.HTTPHeaders, hd)
			}
		}
		_, _, err = m.hookHTTP.HTTPGet(ctx, &plain, t, to)
	}
	return err
}

// hookTimeout is what is left of ctx's deadline, for the runtime's own
// ExecSync timeout (which kills the command) and the HTTP client's.
func hookTimeout(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return max(time.Until(d), time.Millisecond)
	}
	return postStartTimeout
}
