package lifecycle

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle/logs"
)

// LogOptions select what Logs returns, as kubectl logs' flags.
type LogOptions struct {
	// Container is the container's name; "" the pod's first container.
	Container string
	// Previous reads the container's previous instance (the attempt
	// before the newest), which must exist.
	Previous bool
	// Tail > 0 is the last Tail lines, 0 none, < 0 all.
	Tail int
	// Since, when set, skips lines written before it.
	Since time.Time
	// Timestamps prefixes each line with the runtime's timestamp.
	Timestamps bool
	// Follow keeps writing lines as the container writes them, across
	// rotations, until it stops or ctx ends.
	Follow bool
}

// newRotator makes the Manager's container log rotator: the kubelet's
// defaults for what cfg leaves zero.
func newRotator(cfg Config, log *slog.Logger) (*logs.Rotator, error) {
	p := cfg.ContainerLogs
	if p.MaxSize == 0 {
		p.MaxSize = logs.DefaultMaxSize
	}
	if p.MaxFiles == 0 {
		p.MaxFiles = logs.DefaultMaxFiles
	}
	return logs.NewRotator(logs.RotatorConfig{Runtime: cfg.Runtime, Policy: p,
		Interval: cfg.ContainerLogMonitorInterval, Now: cfg.Now, Logger: log})
}

// Logs copies a container's log to w: its newest instance, or with
// Previous the one before, across the log's rotated files.
func (m *Manager) Logs(ctx context.Context, namespace, name string, opts LogOptions, w io.Writer) error {
	c, err := m.logContainer(ctx, namespace, name, opts.Container, opts.Previous)
	if err != nil {
		return err
	}
	cctx, cancel := call(ctx)
	s, err := m.cfg.Runtime.ContainerStatus(cctx, c.Id)
	cancel()
	if err != nil {
		return err
	}
	ro := logs.Options{Tail: opts.Tail, Since: opts.Since, Timestamps: opts.Timestamps,
		Follow: opts.Follow && !opts.Previous, Running: m.stillRunning(c.Id)}
	return logs.Read(ctx, s.GetLogPath(), ro, w)
}

// stillRunning says, for a follower, whether container id may still write.
func (m *Manager) stillRunning(id string) func(context.Context) bool {
	return func(ctx context.Context) bool {
		cctx, cancel := call(ctx)
		defer cancel()
		s, err := m.cfg.Runtime.ContainerStatus(cctx, id)
		if err != nil {
			return false // removed: it writes no more
		}
		st := s.GetState()
		return st == runtimeapi.ContainerState_CONTAINER_RUNNING || st == runtimeapi.ContainerState_CONTAINER_CREATED
	}
}

// logContainer finds the newest instance of a pod's container, or with
// previous the instance before it.
func (m *Manager) logContainer(ctx context.Context, namespace, name, container string, previous bool) (*runtimeapi.Container, error) {
	m.mu.Lock()
	var sandboxID, first string
	for _, s := range m.pods {
		if s.pod.Namespace == namespace && s.pod.Name == name {
			sandboxID, first = s.sandboxID, s.pod.Spec.Containers[0].Name
		}
	}
	m.mu.Unlock()
	if sandboxID == "" {
		return nil, fmt.Errorf("%w: %s/%s", ErrNotFound, namespace, name)
	}
	if container == "" {
		container = first
	}
	cctx, cancel := call(ctx)
	defer cancel()
	ctrs, err := m.cfg.Runtime.ListContainers(cctx, sandboxID, nil)
	if err != nil {
		return nil, err
	}
	var newest, prev *runtimeapi.Container
	for _, c := range ctrs {
		if c.GetMetadata().GetName() != container {
			continue
		}
		switch a := c.GetMetadata().GetAttempt(); {
		case newest == nil || a > newest.GetMetadata().GetAttempt():
			newest, prev = c, newest
		case prev == nil || a > prev.GetMetadata().GetAttempt():
			prev = c
		}
	}
	switch {
	case newest == nil:
		return nil, fmt.Errorf("%w: %q in pod %s/%s", ErrContainerNotFound, container, namespace, name)
	case previous && prev == nil:
		return nil, fmt.Errorf("%w: previous terminated container %q in pod %s/%s", ErrContainerNotFound, container, namespace, name)
	case previous:
		return prev, nil
	}
	return newest, nil
}

// logPath is the log path of container id, "" when the runtime does not
// say.
func (m *Manager) logPath(ctx context.Context, id string) string {
	cctx, cancel := call(ctx)
	defer cancel()
	s, err := m.cfg.Runtime.ContainerStatus(cctx, id)
	if err != nil {
		return ""
	}
	return s.GetLogPath()
}

// removeLog removes the log files of a removed container, rotated ones
// included, as the kubelet's removeContainerLog: containerd leaves them,
// and a crash-looping container would leave one log per attempt until its
// pod goes.
func (m *Manager) removeLog(id, path string) {
	if path == "" {
		return
	}
	if err := logs.Clean(path); err != nil {
		m.log.Warn("remove a removed container's log", "container", id, "path", path, "err", err)
	}
}
