package cri

import (
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Phase is a container's state as the kubelet sees it (kubecontainer.State).
type Phase string

// The phases of toKubeContainerState.
const (
	PhaseCreated Phase = "created"
	PhaseRunning Phase = "running"
	PhaseExited  Phase = "exited"
	PhaseUnknown Phase = "unknown"
)

// Reasons containerd (and CRI-O) give for an exited container.
const (
	ReasonCompleted = "Completed"
	ReasonError     = "Error"
	ReasonOOMKilled = "OOMKilled"
)

// oomExitCode is the exit status of a process killed by SIGKILL (128 + 9),
// which is how the kernel's OOM killer ends a task.
const oomExitCode = 137

// State is a container's status reduced to what nodeguard decides on.
type State struct {
	Phase     Phase
	ExitCode  int32
	Reason    string
	Message   string
	CreatedAt time.Time // zero when the runtime did not say
	StartedAt time.Time // zero before the container started
	// FinishedAt is zero before the container exited. For a container
	// that exits at once it can precede StartedAt by a millisecond or so:
	// containerd takes StartedAt when its start call returns, and the exit
	// time from the shim's exit event, which can come first.
	FinishedAt time.Time
	// OOMKilled is true when the runtime's reason is OOMKilled AND the exit
	// code is 137. Both are needed: containerd sets the reason when any
	// memory-cgroup OOM event arrived while the container lived, also when
	// the kernel killed a child and the main process went on to exit
	// otherwise; and 137 (128+SIGKILL) alone is any SIGKILL, a stop's
	// escalation or an eviction as much as the OOM killer. Together they
	// say the OOM killer ended the container's main process.
	OOMKilled bool
}

// ContainerState converts a CRI container status: the phase as
// toKubeContainerState (anything unknown is PhaseUnknown), the exit details
// and timestamps (Unix nanoseconds, 0 for unset), and OOMKilled. A nil
// status is PhaseUnknown.
func ContainerState(status *runtimeapi.ContainerStatus) State {
	if status == nil {
		return State{Phase: PhaseUnknown}
	}
	s := State{
		ExitCode:   status.GetExitCode(),
		Reason:     status.GetReason(),
		Message:    status.GetMessage(),
		CreatedAt:  unixNano(status.GetCreatedAt()),
		StartedAt:  unixNano(status.GetStartedAt()),
		FinishedAt: unixNano(status.GetFinishedAt()),
	}
	switch status.GetState() {
	case runtimeapi.ContainerState_CONTAINER_CREATED:
		s.Phase = PhaseCreated
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		s.Phase = PhaseRunning
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		s.Phase = PhaseExited
	default:
		s.Phase = PhaseUnknown
	}
	s.OOMKilled = s.Reason == ReasonOOMKilled && s.ExitCode == oomExitCode
	return s
}

func unixNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}
