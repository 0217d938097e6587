package cri

import (
	"context"
	"fmt"
	"math"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CreateContainer creates a container in a sandbox; sandboxCfg is the
// config the sandbox was run with. It returns the container's ID.
func (c *Client) CreateContainer(ctx context.Context, sandboxID string, cfg *runtimeapi.ContainerConfig, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error) {
	resp, err := c.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId:  sandboxID,
		Config:        cfg,
		SandboxConfig: sandboxCfg,
	})
	if err != nil {
		pod := sandboxID
		if sandboxCfg.GetMetadata() != nil {
			pod = sandboxName(sandboxCfg)
		}
		return "", opError(ctx, "create container", pod+" "+cfg.GetMetadata().GetName(), err)
	}
	return resp.GetContainerId(), nil
}

// StartContainer starts a created container.
func (c *Client) StartContainer(ctx context.Context, id string) error {
	if _, err := c.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		return opError(ctx, "start container", id, err)
	}
	return nil
}

// StopContainer stops a running container: its stop signal (SIGTERM), then
// SIGKILL after timeout (rounded up to whole seconds, CRI's unit; 0 kills at
// once). ctx must outlast timeout, or the call is cut short.
func (c *Client) StopContainer(ctx context.Context, id string, timeout time.Duration) error {
	if _, err := c.rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: seconds(timeout)}); err != nil {
		return opError(ctx, "stop container", id, err)
	}
	return nil
}

// RemoveContainer removes a container, killing it first if it still runs.
func (c *Client) RemoveContainer(ctx context.Context, id string) error {
	if _, err := c.rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		return opError(ctx, "remove container", id, err)
	}
	return nil
}

// ContainerStatus returns the runtime's status of a container; see
// ContainerState for the kubelet's reading of it.
func (c *Client) ContainerStatus(ctx context.Context, id string) (*runtimeapi.ContainerStatus, error) {
	resp, err := c.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		return nil, opError(ctx, "container status", id, err)
	}
	if resp.GetStatus() == nil {
		return nil, fmt.Errorf("container status %s: the runtime returned no status", id)
	}
	return resp.GetStatus(), nil
}

// ListContainers returns nodeguard's containers (ManagedLabel=true) in
// sandboxID ("" for every sandbox) that also carry every label in labels.
func (c *Client) ListContainers(ctx context.Context, sandboxID string, labels map[string]string) ([]*runtimeapi.Container, error) {
	sel := managedSelector(labels)
	resp, err := c.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{
		Filter: &runtimeapi.ContainerFilter{PodSandboxId: sandboxID, LabelSelector: sel},
	})
	if err != nil {
		what := selectorString(sel)
		if sandboxID != "" {
			what = "in " + sandboxID + " " + what
		}
		return nil, opError(ctx, "list containers", what, err)
	}
	return resp.GetContainers(), nil
}

// ExecResult is the outcome of ExecSync.
type ExecResult struct {
	Stdout, Stderr []byte
	ExitCode       int32
}

// ExecSync runs cmd in a running container and waits for it; timeout (whole
// seconds, rounded up; 0 for none) makes the runtime kill it. A command that
// runs and fails is not an error: see ExitCode.
func (c *Client) ExecSync(ctx context.Context, id string, cmd []string, timeout time.Duration) (ExecResult, error) {
	resp, err := c.rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: seconds(timeout)})
	if err != nil {
		return ExecResult{}, opError(ctx, "exec in container", fmt.Sprintf("%s %q", id, cmd), err)
	}
	return ExecResult{Stdout: resp.GetStdout(), Stderr: resp.GetStderr(), ExitCode: resp.GetExitCode()}, nil
}

// seconds rounds d up to whole seconds; negative is 0.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := math.Ceil(d.Seconds())
	return int64(s)
}

// ListContainerStats returns the runtime's statistics of nodeguard's
// containers: CPU, memory and the writable layer's bytes and inodes.
func (c *Client) ListContainerStats(ctx context.Context) ([]*runtimeapi.ContainerStats, error) {
	sel := managedSelector(nil)
	resp, err := c.rt.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{
		Filter: &runtimeapi.ContainerStatsFilter{LabelSelector: sel},
	})
	if err != nil {
		return nil, opError(ctx, "list container stats", selectorString(sel), err)
	}
	return resp.GetStats(), nil
}
