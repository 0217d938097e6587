// Exec in a pod's container, through the CRI.

package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// containerID finds the running (or newest) container of a pod.
func (m *Manager) containerID(ctx context.Context, namespace, name, container string) (string, error) {
	m.mu.Lock()
	var st *podState
	for _, s := range m.pods {
		if s.pod.Namespace == namespace && s.pod.Name == name {
			st = s
		}
	}
	sandboxID := ""
	if st != nil {
		sandboxID = st.sandboxID
	}
	m.mu.Unlock()
	if sandboxID == "" {
		return "", fmt.Errorf("%w: %s/%s", ErrNotFound, namespace, name)
	}
	if container == "" {
		container = st.pod.Spec.Containers[0].Name
	}
	cctx, cancel := call(ctx)
	defer cancel()
	ctrs, err := m.cfg.Runtime.ListContainers(cctx, sandboxID, nil)
	if err != nil {
		return "", err
	}
	c, ok := latest(ctrs)[container]
	if !ok {
		return "", fmt.Errorf("%w: %q in pod %s/%s", ErrContainerNotFound, container, namespace, name)
	}
	return c.Id, nil
}

// Exec runs cmd in a container and waits for it.
func (m *Manager) Exec(ctx context.Context, namespace, name, container string, cmd []string, timeout time.Duration) (cri.ExecResult, error) {
	id, err := m.containerID(ctx, namespace, name, container)
	if err != nil {
		return cri.ExecResult{}, err
	}
	return m.cfg.Runtime.ExecSync(ctx, id, cmd, timeout)
}
