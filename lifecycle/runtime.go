package lifecycle

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// Runtime is the part of the CRI the Manager uses; *cri.Client is one.
type Runtime interface {
	RunPodSandbox(ctx context.Context, cfg *runtimeapi.PodSandboxConfig) (string, error)
	StopPodSandbox(ctx context.Context, id string) error
	RemovePodSandbox(ctx context.Context, id string) error
	PodSandboxStatus(ctx context.Context, id string) (*cri.SandboxStatus, error)
	ListPodSandbox(ctx context.Context, labels map[string]string) ([]*runtimeapi.PodSandbox, error)
	ListAllPodSandboxes(ctx context.Context) ([]*runtimeapi.PodSandbox, error)
	CreateContainer(ctx context.Context, sandboxID string, cfg *runtimeapi.ContainerConfig, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error)
	StartContainer(ctx context.Context, id string) error
	StopContainer(ctx context.Context, id string, timeout time.Duration) error
	RemoveContainer(ctx context.Context, id string) error
	ContainerStatus(ctx context.Context, id string) (*runtimeapi.ContainerStatus, error)
	ListContainers(ctx context.Context, sandboxID string, labels map[string]string) ([]*runtimeapi.Container, error)
	// Relist is ListContainers of every container decoded for the relist
	// alone (id, sandbox, state, pod UID).
	Relist(ctx context.Context) ([]cri.RelistedContainer, error)
	// RelistSandboxes: ListPodSandbox of every sandbox decoded for the
	// relist alone (id, state, pod UID).
	RelistSandboxes(ctx context.Context) ([]cri.RelistedSandbox, error)
	ListContainerStats(ctx context.Context) ([]*runtimeapi.ContainerStats, error)
	ExecSync(ctx context.Context, id string, cmd []string, timeout time.Duration) (cri.ExecResult, error)
	// ResolveImage and PullImage: the pull policy's decision, then the
	// pull with one credential (images.go tries each).
	ResolveImage(ctx context.Context, ref string, policy corev1.PullPolicy) (id string, pull bool, err error)
	PullImage(ctx context.Context, ref string, auth *runtimeapi.AuthConfig, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error)
	// ImageStatus gives the image's user, for runAsNonRoot.
	ImageStatus(ctx context.Context, ref string) (*runtimeapi.Image, error)
	// DeleteTask deletes a stopped task the runtime's CRI lost track of;
	// cri.ErrNotContainerd where the runtime has no such repair.
	DeleteTask(ctx context.Context, containerID string) error
	// ReopenContainerLog makes the runtime write a new log file after a
	// rotation renamed the old one (lifecycle/logs).
	ReopenContainerLog(ctx context.Context, id string) error
}

var _ Runtime = (*cri.Client)(nil)
