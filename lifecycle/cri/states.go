package cri

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RelistedContainer is one container as a relist compares it: the fields of
// a CRI Container that say which pod it is of and whether it changed.
type RelistedContainer struct {
	ID, SandboxID string
	// PodUID is its PodUIDLabel ("" when it has none).
	PodUID string
	State  runtimeapi.ContainerState
}

// Relist is ListContainers(ctx, "", nil) as a relist needs
// it, every second: the response is decoded for the id, sandbox id, state
// and pod UID label of each container and nothing else. Decoding the
// whole of it (labels and annotations are protobuf maps, a dozen entries
// a container) was most of the CPU of nodeguard's once-a-second relist at
// 250 pods. The request is ListContainers', on the same connection.
func (c *Client) Relist(ctx context.Context) ([]RelistedContainer, error) {
	sel := managedSelector(nil)
	req := &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{LabelSelector: sel}}
	var out containerStates
	if err := c.conn.Invoke(ctx, runtimeapi.RuntimeService_ListContainers_FullMethodName, req, &out, grpc.ForceCodecV2(statesCodec{})); err != nil {
		return nil, opError(ctx, "list containers", selectorString(sel), err)
	}
	return out, nil
}

// containerStates is the reply Relist decodes into.
type containerStates []RelistedContainer

// statesCodec marshals requests as gRPC's proto codec does and decodes a
// ListContainersResponse into containerStates.
type statesCodec struct{}

func (statesCodec) Name() string { return "proto" }

func (statesCodec) Marshal(v any) (mem.BufferSlice, error) {
	return encoding.GetCodecV2("proto").Marshal(v)
}

func (statesCodec) Unmarshal(data mem.BufferSlice, v any) error {
	out, ok := v.(*containerStates)
	if !ok {
		return fmt.Errorf("container states codec: cannot decode into %T", v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	states, err := decodeContainerStates(buf.ReadOnlyData())
	if err != nil {
		return fmt.Errorf("decode ListContainersResponse: %w", err)
	}
	*out = states
	return nil
}

// Field numbers of runtime.v1's api.proto.
const (
	wireResponseContainers = 1 // repeated Container
	wireContainerID        = 1 // string
	wireContainerSandboxID = 2 // string
	wireContainerState     = 6 // ContainerState (enum)
	wireContainerLabels    = 8 // map<string, string>
	wireMapKey             = 1
	wireMapValue           = 2
)

// decodeContainerStates decodes a ListContainersResponse's wire bytes,
// keeping what RelistedContainer holds. Every field is walked as protobuf
// wire data (an unknown or unwanted one skipped whole), so a malformed
// message is an error that says where, never a partial list.
func decodeContainerStates(b []byte) ([]RelistedContainer, error) {
	var out []RelistedContainer
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, fmt.Errorf("response field tag: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if num == wireResponseContainers && typ == protowire.BytesType {
			msg, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, fmt.Errorf("container %d: %w", len(out), protowire.ParseError(n))
			}
			c, err := decodeContainerState(msg)
			if err != nil {
				return nil, fmt.Errorf("container %d: %w", len(out), err)
			}
			out = append(out, c)
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return nil, fmt.Errorf("response field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
	}
	return out, nil
}

func decodeContainerState(b []byte) (RelistedContainer, error) {
	var c RelistedContainer
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return c, fmt.Errorf("field tag: %w", protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case (num == wireContainerID || num == wireContainerSandboxID) && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return c, fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
			}
			if num == wireContainerID {
				c.ID = string(v)
			} else {
				c.SandboxID = string(v)
			}
			b = b[n:]
		case num == wireContainerState && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return c, fmt.Errorf("state: %w", protowire.ParseError(n))
			}
			c.State = runtimeapi.ContainerState(int32(v))
			b = b[n:]
		case num == wireContainerLabels && typ == protowire.BytesType:
			entry, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return c, fmt.Errorf("label: %w", protowire.ParseError(n))
			}
			uid, v, err := podUIDEntry(entry)
			if err != nil {
				return c, fmt.Errorf("label: %w", err)
			}
			if uid {
				c.PodUID = v
			}
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return c, fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
			}
			b = b[n:]
		}
	}
	return c, nil
}

// podUIDEntry decodes a map<string, string> entry and reports whether
// its key is PodUIDLabel, with the value then: nothing else is copied out
// of the buffer.
func podUIDEntry(b []byte) (ok bool, value string, err error) {
	var k, v []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false, "", protowire.ParseError(n)
		}
		b = b[n:]
		if (num == wireMapKey || num == wireMapValue) && typ == protowire.BytesType {
			s, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false, "", protowire.ParseError(n)
			}
			if num == wireMapKey {
				k = s
			} else {
				v = s
			}
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return false, "", protowire.ParseError(n)
		}
		b = b[n:]
	}
	if string(k) != PodUIDLabel {
		return false, "", nil
	}
	return true, string(v), nil
}
