package cri

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The relist's decoding agrees with the generated types' on what they
// marshal: every container, in order, with its id, sandbox id, state and
// pod UID label, whatever else it carries (metadata, image, maps, fields
// of a newer CRI the decoder skips).
func TestDecodeContainerStatesAgreesWithTheProtoTypes(t *testing.T) {
	resp := &runtimeapi.ListContainersResponse{}
	states := []runtimeapi.ContainerState{runtimeapi.ContainerState_CONTAINER_CREATED, runtimeapi.ContainerState_CONTAINER_RUNNING,
		runtimeapi.ContainerState_CONTAINER_EXITED, runtimeapi.ContainerState_CONTAINER_UNKNOWN}
	for i := range 9 {
		c := &runtimeapi.Container{
			Id: fmt.Sprintf("c%02d", i), PodSandboxId: fmt.Sprintf("sb%d", i/2),
			Metadata: &runtimeapi.ContainerMetadata{Name: "main", Attempt: uint32(i)},
			Image:    &runtimeapi.ImageSpec{Image: "busybox", Annotations: map[string]string{PodUIDLabel: "not-a-label"}},
			ImageRef: "sha256:x", State: states[i%len(states)], CreatedAt: int64(i) << 40,
			Labels:      map[string]string{ManagedLabel: "true", "io.kubernetes.pod.name": "p", "io.kubernetes.container.name": "main"},
			Annotations: map[string]string{PodUIDLabel: "an-annotation", "io.kubernetes.container.restartCount": "3"},
		}
		if i != 4 { // one without the label
			c.Labels[PodUIDLabel] = fmt.Sprintf("uid-%d", i)
		}
		resp.Containers = append(resp.Containers, c)
	}
	b, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	// A field number the decoder does not know, as a newer runtime may
	// send: skipped.
	b = append(b, 0xfa, 0x01, 0x03, 'n', 'e', 'w') // field 31, bytes "new"
	got, err := decodeContainerStates(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(resp.Containers) {
		t.Fatalf("%d containers decoded, want %d", len(got), len(resp.Containers))
	}
	for i, c := range resp.Containers {
		want := RelistedContainer{ID: c.Id, SandboxID: c.PodSandboxId, PodUID: c.Labels[PodUIDLabel], State: c.State}
		if got[i] != want {
			t.Errorf("container %d: %+v, want %+v", i, got[i], want)
		}
	}
	if got, err := decodeContainerStates(nil); err != nil || len(got) != 0 {
		t.Errorf("an empty response: %v %v, want no containers", got, err)
	}
}

// Sandboxes are decoded as containers are, with their own field numbers:
// id, state and pod UID label, nothing of metadata, maps or newer fields.
func TestDecodeSandboxStatesAgreesWithTheProtoTypes(t *testing.T) {
	resp := &runtimeapi.ListPodSandboxResponse{}
	for i := range 5 {
		sb := &runtimeapi.PodSandbox{
			Id:       fmt.Sprintf("sb%02d", i),
			Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Uid: "metadata-uid", Namespace: "ns", Attempt: uint32(i)},
			State:    runtimeapi.PodSandboxState(i % 2), CreatedAt: int64(i) << 40, RuntimeHandler: "runc",
			Labels:      map[string]string{ManagedLabel: "true", "io.kubernetes.pod.name": "p"},
			Annotations: map[string]string{PodUIDLabel: "an-annotation"},
		}
		if i != 3 {
			sb.Labels[PodUIDLabel] = fmt.Sprintf("uid-%d", i)
		}
		resp.Items = append(resp.Items, sb)
	}
	b, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, 0xfa, 0x01, 0x03, 'n', 'e', 'w') // field 31, bytes "new"
	got, err := decodeSandboxStates(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(resp.Items) {
		t.Fatalf("%d sandboxes decoded, want %d", len(got), len(resp.Items))
	}
	for i, sb := range resp.Items {
		want := RelistedSandbox{ID: sb.Id, PodUID: sb.Labels[PodUIDLabel], State: sb.State}
		if got[i] != want {
			t.Errorf("sandbox %d: %+v, want %+v", i, got[i], want)
		}
	}
	if _, err := decodeSandboxStates(b[:len(b)-8]); err == nil || !strings.Contains(err.Error(), "sandbox 4") {
		t.Errorf("a response cut in the last sandbox: %v, want an error naming sandbox 4", err)
	}
}

// A truncated or mangled response is an error naming where, never a
// shorter list.
func TestDecodeContainerStatesRefusesMalformedBytes(t *testing.T) {
	resp := &runtimeapi.ListContainersResponse{Containers: []*runtimeapi.Container{
		{Id: "a", PodSandboxId: "sa", State: runtimeapi.ContainerState_CONTAINER_RUNNING, Labels: map[string]string{PodUIDLabel: "u"}},
		{Id: "b", PodSandboxId: "sb", State: runtimeapi.ContainerState_CONTAINER_RUNNING, Labels: map[string]string{PodUIDLabel: "u"}},
	}}
	b, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"cut in the second container", b[:len(b)-3], "container 1"},
		{"a tag cut short", append(append([]byte{}, b...), 0x80), "response field tag"},
		{"a container whose length runs past the end", append([]byte{0x0a, 0x7f}, b...), "container 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeContainerStates(tc.b)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("decode = %v, %v; want an error naming %q", got, err, tc.want)
			}
		})
	}
}

func BenchmarkDecodeListContainers(b *testing.B) {
	resp := &runtimeapi.ListContainersResponse{}
	for i := range 250 {
		resp.Containers = append(resp.Containers, &runtimeapi.Container{
			Id: fmt.Sprintf("%064d", i), PodSandboxId: fmt.Sprintf("%063dx", i),
			Metadata: &runtimeapi.ContainerMetadata{Name: "main"}, Image: &runtimeapi.ImageSpec{Image: "registry.local/nodeguard/busybox:1.35"},
			ImageRef: "sha256:69406183ac82c8ae5e32545070603422b5dc63b43a7f7eacc5def6f218ac7c5b", State: runtimeapi.ContainerState_CONTAINER_RUNNING,
			Labels: map[string]string{ManagedLabel: "true", PodUIDLabel: fmt.Sprintf("0f1e2d3c-aaaa-bbbb-cccc-%012d", i), "io.kubernetes.pod.name": "idle-1",
				"io.kubernetes.pod.namespace": "bench", "io.kubernetes.container.name": "main"},
			Annotations: map[string]string{"io.kubernetes.container.hash": "1", "io.kubernetes.container.restartCount": "0",
				"io.kubernetes.container.terminationMessagePath": "/dev/termination-log", "io.kubernetes.pod.terminationGracePeriod": "30"},
		})
	}
	data, err := proto.Marshal(resp)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("generated types", func(b *testing.B) {
		for b.Loop() {
			var r runtimeapi.ListContainersResponse
			if err := proto.Unmarshal(data, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("relist fields only", func(b *testing.B) {
		for b.Loop() {
			if _, err := decodeContainerStates(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
