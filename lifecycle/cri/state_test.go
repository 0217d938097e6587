package cri

import (
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestContainerStatePhases(t *testing.T) {
	tests := []struct {
		name  string
		state runtimeapi.ContainerState
		want  Phase
	}{
		{"created is created", runtimeapi.ContainerState_CONTAINER_CREATED, PhaseCreated},
		{"running is running", runtimeapi.ContainerState_CONTAINER_RUNNING, PhaseRunning},
		{"exited is exited", runtimeapi.ContainerState_CONTAINER_EXITED, PhaseExited},
		{"unknown is unknown", runtimeapi.ContainerState_CONTAINER_UNKNOWN, PhaseUnknown},
		{"a state from a newer runtime is unknown", runtimeapi.ContainerState(42), PhaseUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ContainerState(&runtimeapi.ContainerStatus{State: tt.state}).Phase; got != tt.want {
				t.Errorf("phase = %q, want %q", got, tt.want)
			}
		})
	}
	if got := ContainerState(nil).Phase; got != PhaseUnknown {
		t.Errorf("nil status: phase %q, want unknown", got)
	}
}

func TestContainerStateOOMKilled(t *testing.T) {
	tests := []struct {
		name   string
		reason string
		code   int32
		want   bool
	}{
		{"reason OOMKilled alone is not an OOM kill of the main process", "OOMKilled", 1, false},
		{"exit 137 alone is any SIGKILL", "Error", 137, false},
		{"reason OOMKilled with exit 137 is an OOM kill", "OOMKilled", 137, true},
		{"a clean exit is not", "Completed", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := ContainerState(&runtimeapi.ContainerStatus{State: runtimeapi.ContainerState_CONTAINER_EXITED, Reason: tt.reason, ExitCode: tt.code})
			if s.OOMKilled != tt.want {
				t.Errorf("OOMKilled = %v, want %v", s.OOMKilled, tt.want)
			}
		})
	}
}

func TestContainerStateCarriesExitDetails(t *testing.T) {
	created := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	s := ContainerState(&runtimeapi.ContainerStatus{
		State: runtimeapi.ContainerState_CONTAINER_EXITED, ExitCode: 3, Reason: "Error", Message: "bye",
		CreatedAt: created.UnixNano(), StartedAt: created.Add(time.Second).UnixNano(), FinishedAt: created.Add(2 * time.Second).UnixNano(),
	})
	if s.Phase != PhaseExited || s.ExitCode != 3 || s.Reason != "Error" || s.Message != "bye" {
		t.Errorf("state = %+v", s)
	}
	if !s.CreatedAt.Equal(created) || s.FinishedAt.Sub(s.StartedAt) != time.Second {
		t.Errorf("times: created %v started %v finished %v", s.CreatedAt, s.StartedAt, s.FinishedAt)
	}
	running := ContainerState(&runtimeapi.ContainerStatus{State: runtimeapi.ContainerState_CONTAINER_RUNNING, StartedAt: created.UnixNano()})
	if !running.FinishedAt.IsZero() {
		t.Errorf("a running container's FinishedAt = %v, want zero", running.FinishedAt)
	}
}

func TestNetNSFromInfo(t *testing.T) {
	for _, tc := range []struct {
		name, info, want string
		wantErr          bool
	}{
		{"containerd", `{"pid":1,"runtimeSpec":{"linux":{"namespaces":[{"type":"pid"},{"type":"network","path":"/run/netns/cni-1"}]}}}`, "/run/netns/cni-1", false},
		{"host network", `{"runtimeSpec":{"linux":{"namespaces":[{"type":"pid"}]}}}`, "", false},
		{"no spec", `{"pid":1}`, "", false},
		{"garbage", `{`, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := netNSFromInfo([]byte(tc.info))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("netNSFromInfo = %q, %v; want %q, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
