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

// RelistedSandbox is one sandbox as a relist compares it.
type RelistedSandbox struct {
	ID string
	// PodUID is its PodUIDLabel ("" when it has none).
	PodUID string
	State  runtimeapi.PodSandboxState
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

// RelistSandboxes is ListPodSandbox(ctx, nil) decoded as Relist decodes
// containers: the id, state and pod UID label of each of nodeguard's
// sandboxes, for the relist to see a sandbox that stopped under running
// containers as the kubelet's PLEG does.
func (c *Client) RelistSandboxes(ctx context.Context) ([]RelistedSandbox, error) {
	sel := managedSelector(nil)
	req := &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{LabelSelector: sel}}
	var out sandboxStates
	if err := c.conn.Invoke(ctx, runtimeapi.RuntimeService_ListPodSandbox_FullMethodName, req, &out, grpc.ForceCodecV2(statesCodec{})); err != nil {
		return nil, opError(ctx, "list pod sandboxes", selectorString(sel), err)
	}
	return out, nil
}

// containerStates and sandboxStates are the replies the relist decodes
// into.
type (
	containerStates []RelistedContainer
	sandboxStates   []RelistedSandbox
)

// statesCodec marshals requests as gRPC's proto codec does and decodes a
// ListContainersResponse into containerStates, a ListPodSandboxResponse
// into sandboxStates.
type statesCodec struct{}

func (statesCodec) Name() string { return "proto" }

func (statesCodec) Marshal(v any) (mem.BufferSlice, error) {
	return encoding.GetCodecV2("proto").Marshal(v)
}

func (statesCodec) Unmarshal(data mem.BufferSlice, v any) error {
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	switch out := v.(type) {
	case *containerStates:
		states, err := decodeContainerStates(buf.ReadOnlyData())
		if err != nil {
			return fmt.Errorf("decode ListContainersResponse: %w", err)
		}
		*out = states
	case *sandboxStates:
		states, err := decodeSandboxStates(buf.ReadOnlyData())
		if err != nil {
			return fmt.Errorf("decode ListPodSandboxResponse: %w", err)
		}
		*out = states
	default:
		return fmt.Errorf("relist codec: cannot decode into %T", v)
	}
	return nil
}

// listFields are the field numbers, in runtime.v1's api.proto, of a list
// response's items and of the item fields a relist keeps (0: none).
type listFields struct {
	what                         string // names an item in errors
	items                        protowire.Number
	id, sandboxID, state, labels protowire.Number
}

var (
	containerFields = listFields{what: "container", items: 1, id: 1, sandboxID: 2, state: 6, labels: 8}
	sandboxFields   = listFields{what: "sandbox", items: 1, id: 1, state: 3, labels: 5}
)

// Field numbers of a map<string, string> entry.
const (
	wireMapKey   = 1
	wireMapValue = 2
)

// relisted is one item of a list response as decodeList keeps it.
type relisted struct {
	id, sandboxID, podUID string
	state                 int32
}

func decodeContainerStates(b []byte) ([]RelistedContainer, error) {
	return decodeList(b, containerFields, func(r relisted) RelistedContainer {
		return RelistedContainer{ID: r.id, SandboxID: r.sandboxID, PodUID: r.podUID, State: runtimeapi.ContainerState(r.state)}
	})
}

func decodeSandboxStates(b []byte) ([]RelistedSandbox, error) {
	return decodeList(b, sandboxFields, func(r relisted) RelistedSandbox {
		return RelistedSandbox{ID: r.id, PodUID: r.podUID, State: runtimeapi.PodSandboxState(r.state)}
	})
}

// decodeList decodes a list response's wire bytes, keeping of each item
// what relisted holds. Every field is walked as protobuf wire data (an
// unknown or unwanted one skipped whole), so a malformed message is an
// error that says where, never a partial list.
func decodeList[T any](b []byte, f listFields, mk func(relisted) T) ([]T, error) {
	var out []T
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, fmt.Errorf("response field tag: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if num == f.items && typ == protowire.BytesType {
			msg, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, fmt.Errorf("%s %d: %w", f.what, len(out), protowire.ParseError(n))
			}
			r, err := decodeItem(msg, f)
			if err != nil {
				return nil, fmt.Errorf("%s %d: %w", f.what, len(out), err)
			}
			out = append(out, mk(r))
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

func decodeItem(b []byte, f listFields) (relisted, error) {
	var r relisted
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return r, fmt.Errorf("field tag: %w", protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case (num == f.id || num == f.sandboxID) && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return r, fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
			}
			if num == f.id {
				r.id = string(v)
			} else {
				r.sandboxID = string(v)
			}
			b = b[n:]
		case num == f.state && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return r, fmt.Errorf("state: %w", protowire.ParseError(n))
			}
			r.state = int32(v)
			b = b[n:]
		case num == f.labels && typ == protowire.BytesType:
			entry, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return r, fmt.Errorf("label: %w", protowire.ParseError(n))
			}
			uid, v, err := podUIDEntry(entry)
			if err != nil {
				return r, fmt.Errorf("label: %w", err)
			}
			if uid {
				r.podUID = v
			}
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return r, fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
			}
			b = b[n:]
		}
	}
	return r, nil
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
